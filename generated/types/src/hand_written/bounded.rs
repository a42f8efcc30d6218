//! `BoundedVec`: an array whose length the schema bounds (`minItems` / `maxItems`).
//!
//! The code generator maps every length-bounded array to this type, so the bound is checked
//! when one is built or deserialized, not only by the schema.

use std::fmt;
use std::ops::Deref;

/// A `Vec<T>` of at least `MIN` and at most `MAX` items.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct BoundedVec<T, const MIN: usize, const MAX: usize>(Vec<T>);

/// A length outside the bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LengthError {
    pub len: usize,
    pub min: usize,
    pub max: usize,
}

impl fmt::Display for LengthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.max == usize::MAX {
            write!(f, "{} items, expected at least {}", self.len, self.min)
        } else {
            write!(
                f,
                "{} items, expected {} to {}",
                self.len, self.min, self.max
            )
        }
    }
}

impl std::error::Error for LengthError {}

impl<T, const MIN: usize, const MAX: usize> BoundedVec<T, MIN, MAX> {
    pub fn new(items: Vec<T>) -> Result<Self, LengthError> {
        if (MIN..=MAX).contains(&items.len()) {
            Ok(BoundedVec(items))
        } else {
            Err(LengthError {
                len: items.len(),
                min: MIN,
                max: MAX,
            })
        }
    }

    pub fn into_inner(self) -> Vec<T> {
        self.0
    }
}

impl<T, const MIN: usize, const MAX: usize> TryFrom<Vec<T>> for BoundedVec<T, MIN, MAX> {
    type Error = LengthError;
    fn try_from(items: Vec<T>) -> Result<Self, LengthError> {
        Self::new(items)
    }
}

impl<T, const MIN: usize, const MAX: usize> From<BoundedVec<T, MIN, MAX>> for Vec<T> {
    fn from(v: BoundedVec<T, MIN, MAX>) -> Vec<T> {
        v.0
    }
}

impl<T, const MIN: usize, const MAX: usize> Deref for BoundedVec<T, MIN, MAX> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T: fmt::Debug, const MIN: usize, const MAX: usize> fmt::Debug for BoundedVec<T, MIN, MAX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Items separated by commas (typify wants `Display` of converted types).
impl<T: fmt::Display, const MIN: usize, const MAX: usize> fmt::Display for BoundedVec<T, MIN, MAX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, item) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            item.fmt(f)?;
        }
        Ok(())
    }
}

impl<T: serde::Serialize, const MIN: usize, const MAX: usize> serde::Serialize
    for BoundedVec<T, MIN, MAX>
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, T: serde::Deserialize<'de>, const MIN: usize, const MAX: usize> serde::Deserialize<'de>
    for BoundedVec<T, MIN, MAX>
{
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let items = Vec::<T>::deserialize(deserializer)?;
        Self::new(items).map_err(serde::de::Error::custom)
    }
}
