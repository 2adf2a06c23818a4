//! `gridwise bench schedule` in its quick form: real daemons, models learned with GBBP, every
//! policy run through the graph API, and one JSON object per policy with the fields.

use gridwise_bench::schedule::{run_scenario, summary};
use gridwise_e2e::bin;
use gridwise_localgrid::Launcher;

#[test]
fn quick_crossing_reports_every_policy_against_the_lp_bound() {
    let agent = Launcher::program(bin("gridwise-agent"));
    let server = Launcher::program(bin("gridwise-server"));
    let mut lines = Vec::new();
    run_scenario(&agent, server, "crossing", true, 1, &mut |l| lines.push(l)).unwrap();
    // crossing is a bag: every policy, lp included.
    assert_eq!(
        lines.len(),
        gridwise_sched::graph::GraphPolicy::ALL.len(),
        "one line per policy: {lines:#?}"
    );
    for l in &lines {
        for key in [
            "bench",
            "scenario",
            "policy",
            "makespan_s",
            "oracle_makespan_s",
            "lower_bound_s",
            "predicted_makespan_s",
            "default",
        ] {
            assert!(l.get(key).is_some(), "{key} missing from {l}");
        }
        let made = l["makespan_s"].as_f64().unwrap_or_else(|| panic!("{l}"));
        let bound = l["lower_bound_s"].as_f64().unwrap();
        // Measured on real sleeps: no run can beat the LP bound of the true speeds.
        assert!(made >= bound * 0.98, "{l}");
        assert!(
            l["oracle_makespan_s"].as_f64().unwrap() >= bound * 0.999,
            "{l}"
        );
    }
    let defaults: Vec<_> = lines.iter().filter(|l| l["default"] == true).collect();
    assert_eq!(defaults.len(), 1);
    assert_eq!(defaults[0]["policy"], "lp", "a bag of calls defaults to lp");
    let s = summary("crossing", &lines);
    assert_eq!(s["default_policy"], "lp");
    assert!(s["prediction_error_max"].as_f64().is_some(), "{s}");
}
