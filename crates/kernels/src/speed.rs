//! True speed functions for emulated servers: how many operations per second a server really
//! achieves at each problem size, which the agent must learn without ever reading it.

/// Why a list of speed points was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpeedError {
    /// No points at all.
    #[error("the speed function needs at least one [size, speed] point")]
    Empty,
    /// A size that is NaN or infinite.
    #[error("point {index}: size {size} is not a finite number")]
    BadSize {
        /// Position in the list, from 0.
        index: usize,
        size: f64,
    },
    /// Sizes out of order or repeated.
    #[error(
        "point {index}: size {size} does not come after the previous size {prev}; list points by strictly increasing size"
    )]
    NotIncreasing {
        /// Position in the list, from 0.
        index: usize,
        /// The size of point `index - 1`.
        prev: f64,
        size: f64,
    },
    /// A speed that is negative, NaN or infinite.
    #[error(
        "point {index} (size {size}): speed {speed} must be a finite number >= 0 (operations per second; 0 means the size does not fit)"
    )]
    BadSpeed {
        /// Position in the list, from 0.
        index: usize,
        size: f64,
        speed: f64,
    },
}

/// A piecewise-linear speed S(x) in operations per second, constant beyond its end points.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedFunction {
    points: Vec<(f64, f64)>,
}

impl SpeedFunction {
    /// A speed function through `(size, speed)` points listed by strictly increasing size.
    pub fn new(points: Vec<(f64, f64)>) -> Result<Self, SpeedError> {
        if points.is_empty() {
            return Err(SpeedError::Empty);
        }
        for (index, &(size, speed)) in points.iter().enumerate() {
            if !size.is_finite() {
                return Err(SpeedError::BadSize { index, size });
            }
            if index > 0 {
                let prev = points[index - 1].0;
                if size <= prev {
                    return Err(SpeedError::NotIncreasing { index, prev, size });
                }
            }
            if !(speed.is_finite() && speed >= 0.0) {
                return Err(SpeedError::BadSpeed { index, size, speed });
            }
        }
        Ok(Self { points })
    }

    /// The points, by increasing size.
    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// S(x): linear between points, the end value outside them.
    pub fn speed(&self, x: f64) -> f64 {
        let i = self.points.partition_point(|p| p.0 <= x);
        let (Some(&(x0, s0)), Some(&(x1, s1))) = (
            i.checked_sub(1).and_then(|j| self.points.get(j)),
            self.points.get(i),
        ) else {
            // Outside the points (or a NaN x): the nearest end value.
            return if i == 0 {
                self.points.first().map_or(0.0, |p| p.1)
            } else {
                self.points.last().map_or(0.0, |p| p.1)
            };
        };
        let t = (x - x0) / (x1 - x0);
        // Clamp so rounding can never step outside the segment's speeds.
        (s0 + t * (s1 - s0)).clamp(s0.min(s1), s0.max(s1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn points() -> impl Strategy<Value = Vec<(f64, f64)>> {
        proptest::collection::vec((0.5f64..1000.0, 0.0f64..1e12), 1..8).prop_map(|v| {
            let mut size = 0.0;
            v.into_iter()
                .map(|(step, speed)| {
                    size += step;
                    (size, speed)
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn exact_at_points(p in points()) {
            let f = SpeedFunction::new(p.clone()).unwrap();
            for (x, s) in p {
                prop_assert_eq!(f.speed(x), s);
            }
        }

        #[test]
        fn between_neighbouring_points(p in points(), t in 0.0f64..1.0) {
            let f = SpeedFunction::new(p.clone()).unwrap();
            for w in p.windows(2) {
                let ((x0, s0), (x1, s1)) = (w[0], w[1]);
                let s = f.speed(x0 + t * (x1 - x0));
                prop_assert!(s >= s0.min(s1) && s <= s0.max(s1), "{} not in [{}, {}]", s, s0, s1);
            }
        }

        #[test]
        fn constant_outside(p in points(), d in 0.0f64..1e9) {
            let f = SpeedFunction::new(p.clone()).unwrap();
            let (first, last) = (p[0], p[p.len() - 1]);
            prop_assert_eq!(f.speed(first.0 - d), first.1);
            prop_assert_eq!(f.speed(last.0 + d), last.1);
        }
    }

    #[test]
    fn interpolates_linearly() {
        let f = SpeedFunction::new(vec![(100.0, 1e9), (200.0, 3e9), (300.0, 0.0)]).unwrap();
        assert_eq!(f.speed(150.0), 2e9);
        assert_eq!(f.speed(250.0), 1.5e9);
        assert_eq!(f.speed(50.0), 1e9);
        assert_eq!(f.speed(1e6), 0.0);
        let one = SpeedFunction::new(vec![(10.0, 5.0)]).unwrap();
        assert_eq!(one.speed(-1.0), 5.0);
        assert_eq!(one.speed(1e9), 5.0);
    }

    #[test]
    fn bad_points_are_explained() {
        assert_eq!(SpeedFunction::new(vec![]), Err(SpeedError::Empty));
        let e = SpeedFunction::new(vec![(10.0, 1.0), (10.0, 2.0)]).unwrap_err();
        assert!(matches!(e, SpeedError::NotIncreasing { index: 1, .. }));
        assert!(e.to_string().contains("strictly increasing"), "{e}");
        let e = SpeedFunction::new(vec![(10.0, 1.0), (5.0, 2.0)]).unwrap_err();
        assert!(matches!(e, SpeedError::NotIncreasing { .. }));
        let e = SpeedFunction::new(vec![(10.0, -1.0)]).unwrap_err();
        assert!(matches!(e, SpeedError::BadSpeed { .. }));
        assert!(e.to_string().contains(">= 0"), "{e}");
        let e = SpeedFunction::new(vec![(10.0, f64::INFINITY)]).unwrap_err();
        assert!(matches!(e, SpeedError::BadSpeed { .. }));
        let e = SpeedFunction::new(vec![(f64::NAN, 1.0)]).unwrap_err();
        assert!(matches!(e, SpeedError::BadSize { .. }));
    }
}
