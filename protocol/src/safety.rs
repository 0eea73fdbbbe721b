//! The serialization contract: which values may cross the host/runner boundary.
//!
//! JSON itself already excludes most unsafe values (functions, symbols, BigInt, NaN, cycles);
//! what is left to check on a JSON tree is its nesting depth, which every peer must be able
//! to rebuild without exhausting its stack.

use serde_json::Value;

/// Deepest nesting of arrays and objects a transported value may have.
///
/// The runner refuses guest values nested deeper (serialization_error); hosts should refuse
/// tool results nested deeper. Values within it are forwarded untouched.
pub const MAX_NESTING_DEPTH: usize = 1000;

/// Why a value may not cross the boundary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeValue {
    /// Arrays/objects nest deeper than [`MAX_NESTING_DEPTH`].
    #[error("value nests deeper than {limit} levels")]
    TooDeep {
        /// The limit that was exceeded.
        limit: usize,
    },
}

/// Checks a JSON tree against the serialization contract, without recursion.
pub fn check_transport_safe(value: &Value) -> Result<(), UnsafeValue> {
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        if depth + 1 > MAX_NESTING_DEPTH {
            return Err(UnsafeValue::TooDeep {
                limit: MAX_NESTING_DEPTH,
            });
        }
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(depth: usize) -> Value {
        let mut v = json!(0);
        for _ in 0..depth {
            v = json!([v]);
        }
        v
    }

    #[test]
    fn depth_is_bounded() {
        assert_eq!(
            check_transport_safe(&json!({"a": [1, {"b": null}]})),
            Ok(())
        );
        assert_eq!(check_transport_safe(&nested(MAX_NESTING_DEPTH)), Ok(()));
        assert!(check_transport_safe(&nested(MAX_NESTING_DEPTH + 1)).is_err());
    }
}
