//! The services the agent knows: one description per name, shared by every server offering it.
//!
//! A service stays in the catalog after its last server leaves, so the agent can tell "nobody
//! ever offered this" (a typo) from "its servers are down" (wait or retry).

use gridwise_predict::ServiceFacts;
use gridwise_proto::{Complexity, ErrorCode, RpcError, ServiceDesc};
use std::collections::HashMap;

/// A service's dense index in the catalog: per-server and per-service tables are indexed by it,
/// so the hot path compares integers instead of names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceIdx(pub usize);

/// One known service.
#[derive(Clone, Debug)]
pub struct CatalogEntry {
    /// Its position in the catalog, fixed for the agent's life: replacing the description
    /// keeps it.
    pub idx: ServiceIdx,
    /// The description every server offering it published.
    pub desc: ServiceDesc,
    /// What estimates read: its parsed complexity and duration (parsed once, evaluated per
    /// call) and its grid-wide history.
    pub facts: ServiceFacts,
}

impl CatalogEntry {
    pub fn name(&self) -> &str {
        &self.desc.name
    }

    /// Whether `sizes` names the size parameters in the declared order.
    pub fn sizes_match(&self, sizes: &[(String, i64)]) -> bool {
        sizes.len() == self.desc.size_params.len()
            && sizes
                .iter()
                .zip(&self.desc.size_params)
                .all(|((n, _), p)| n == p)
    }
}

/// Every service ever offered, by name and by index.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    entries: Vec<CatalogEntry>,
    by_name: HashMap<String, ServiceIdx>,
}

impl Catalog {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, name: &str) -> Option<&CatalogEntry> {
        self.by_name.get(name).map(|i| &self.entries[i.0])
    }

    /// Notes a successful call's quiet-host kernel time in the service's grid-wide history.
    pub fn record(&mut self, idx: ServiceIdx, quiet_s: f64) {
        self.entries[idx.0].facts.learn_call(quiet_s);
    }

    pub(crate) fn facts_mut(&mut self, idx: ServiceIdx) -> &mut ServiceFacts {
        &mut self.entries[idx.0].facts
    }

    /// The service at `idx` (indices come from this catalog, so it exists).
    pub fn entry(&self, idx: ServiceIdx) -> &CatalogEntry {
        &self.entries[idx.0]
    }

    /// Every service, in the order first seen.
    pub fn iter(&self) -> impl Iterator<Item = &CatalogEntry> {
        self.entries.iter()
    }

    /// How many services are known.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks that `server` may offer `desc`: the description must be valid and, while another
    /// server (`other_provider`, up or down) still offers the service, identical to the known one.
    /// Returns the parsed complexity.
    pub fn admit(
        &self,
        server: &str,
        desc: &ServiceDesc,
        other_provider: Option<&str>,
    ) -> Result<Option<Complexity>, RpcError> {
        desc.validate().map_err(|e| {
            RpcError::new(
                ErrorCode::RpcRefused,
                format!("server `{server}` offers an invalid service description: {e}"),
            )
        })?;
        if let (Some(known), Some(other)) = (self.get(&desc.name), other_provider)
            && known.desc != *desc
        {
            return Err(RpcError::new(
                ErrorCode::RpcRefused,
                format!(
                    "server `{server}` describes service `{name}` as {new}, but server `{other}` \
                     already offers it as {old}; the descriptions must match on every server \
                     (arguments, size parameters, complexity and doc)",
                    name = desc.name,
                    new = describe(desc),
                    old = describe(&known.desc),
                ),
            ));
        }
        desc.compiled_complexity().map_err(|e| {
            RpcError::new(
                ErrorCode::RpcRefused,
                format!("server `{server}` offers an invalid service description: {e}"),
            )
        })
    }

    /// Adds the service or replaces its description (the caller has checked with [`admit`]
    /// that no other server offers a different one). Returns its index and whether a previous,
    /// different description was replaced.
    ///
    /// [`admit`]: Catalog::admit
    pub fn upsert(
        &mut self,
        desc: &ServiceDesc,
        complexity: Option<Complexity>,
    ) -> (ServiceIdx, bool) {
        if let Some(&idx) = self.by_name.get(&desc.name) {
            let e = &mut self.entries[idx.0];
            let changed = e.desc != *desc;
            if changed {
                e.desc = desc.clone();
                e.facts.complexity = complexity;
                e.facts.duration = duration_of(desc);
                e.facts.memory = desc.compiled_memory().ok().flatten();
            }
            return (idx, changed);
        }
        let idx = ServiceIdx(self.entries.len());
        self.entries.push(CatalogEntry {
            idx,
            desc: desc.clone(),
            facts: ServiceFacts {
                complexity,
                duration: duration_of(desc),
                memory: desc.compiled_memory().ok().flatten(),
                ..ServiceFacts::default()
            },
        });
        self.by_name.insert(desc.name.clone(), idx);
        (idx, false)
    }
}

/// The parsed duration of an admitted description (admission validated it).
fn duration_of(desc: &ServiceDesc) -> Option<Complexity> {
    desc.compiled_duration().ok().flatten()
}

/// A description in one line, for conflict messages.
fn describe(d: &ServiceDesc) -> String {
    format!(
        "`{}` with size parameters [{}] and complexity {}",
        d.signature(),
        d.size_params.join(", "),
        d.complexity.as_deref().unwrap_or("(none)")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{dgemm, echo};

    #[test]
    fn upsert_indexes_and_replaces() {
        let mut c = Catalog::new();
        let d = dgemm();
        let cx = c.admit("s1", &d, None).unwrap();
        assert!(cx.is_some());
        let (i, changed) = c.upsert(&d, cx);
        assert!(!changed);
        assert_eq!(c.get("dgemm").unwrap().idx, i);
        assert_eq!(c.entry(i).name(), "dgemm");
        let (j, _) = c.upsert(&echo(), None);
        assert_ne!(i, j);
        assert_eq!(c.len(), 2);

        let mut d2 = dgemm();
        d2.complexity = Some("m*n*k".into());
        let cx2 = c.admit("s1", &d2, None).unwrap();
        let (i2, changed) = c.upsert(&d2, cx2);
        assert_eq!(i2, i);
        assert!(changed);
        assert_eq!(
            c.get("dgemm")
                .unwrap()
                .facts
                .complexity
                .as_ref()
                .unwrap()
                .expr(),
            "m*n*k"
        );
    }

    #[test]
    fn conflicting_description_is_refused_while_offered_elsewhere() {
        let mut c = Catalog::new();
        let d = dgemm();
        c.upsert(&d, d.compiled_complexity().unwrap());
        let mut d2 = dgemm();
        d2.size_params = vec!["m".into(), "n".into()];
        d2.complexity = Some("m*n".into());
        let e = c.admit("s2", &d2, Some("s1")).unwrap_err();
        assert_eq!(e.code, ErrorCode::RpcRefused);
        assert!(e.message.contains("`dgemm`"), "{e}");
        assert!(e.message.contains("must match"), "{e}");
        assert!(e.message.contains("`s1`"), "{e}");
        // The same description is fine, and so is a new one once nobody else offers it.
        c.admit("s2", &d, Some("s1")).unwrap();
        c.admit("s2", &d2, None).unwrap();
    }

    #[test]
    fn invalid_description_is_refused() {
        let c = Catalog::new();
        let mut d = dgemm();
        d.complexity = Some("2*m*q".into());
        let e = c.admit("s1", &d, None).unwrap_err();
        assert_eq!(e.code, ErrorCode::RpcRefused);
        assert!(e.message.contains("`q`"), "{e}");
        d = dgemm();
        d.name = "bad name".into();
        assert_eq!(
            c.admit("s1", &d, None).unwrap_err().code,
            ErrorCode::RpcRefused
        );
    }

    #[test]
    fn sizes_must_match_names_and_order() {
        let mut c = Catalog::new();
        let d = dgemm();
        let (i, _) = c.upsert(&d, None);
        let e = c.entry(i);
        let s = |v: &[&str]| v.iter().map(|n| (n.to_string(), 1)).collect::<Vec<_>>();
        assert!(e.sizes_match(&s(&["m", "n", "k"])));
        assert!(!e.sizes_match(&s(&["m", "k", "n"])));
        assert!(!e.sizes_match(&s(&["m", "n"])));
    }
}
