//! A map that keeps a few entries in a vector and only many in a hash
//! table. A lock object's holds are nearly always one holder, or none: a
//! hash table would allocate room for four entries at the first, which
//! for a process holding ten thousand locks is a quarter of what each
//! hold costs. Past `FEW` entries (a session's many grants) lookups stay
//! constant-time.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

/// Entries kept in the vector before the map moves them to a hash table.
const FEW: usize = 8;

pub(crate) enum SmallMap<K, V> {
    Few(Vec<(K, V)>),
    Many(HashMap<K, V>),
}

impl<K, V> Default for SmallMap<K, V> {
    fn default() -> Self {
        SmallMap::Few(Vec::new())
    }
}

impl<K: Eq + Hash, V> SmallMap<K, V> {
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        match self {
            SmallMap::Few(entries) => entries
                .iter()
                .find(|(k, _)| k.borrow() == key)
                .map(|(_, v)| v),
            SmallMap::Many(map) => map.get(key),
        }
    }

    pub(crate) fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        match self {
            SmallMap::Few(entries) => entries
                .iter_mut()
                .find(|(k, _)| k.borrow() == key)
                .map(|(_, v)| v),
            SmallMap::Many(map) => map.get_mut(key),
        }
    }

    pub(crate) fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.get(key).is_some()
    }

    /// Puts `value` under `key`, returning the value it replaced.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        if let Some(old) = self.get_mut(&key) {
            return Some(std::mem::replace(old, value));
        }
        match self {
            SmallMap::Few(entries) if entries.len() < FEW => {
                // Room for exactly one at first: most maps never hold more.
                if entries.capacity() == 0 {
                    entries.reserve_exact(1);
                }
                entries.push((key, value));
            }
            SmallMap::Few(entries) => {
                let mut map: HashMap<K, V> = std::mem::take(entries).into_iter().collect();
                map.insert(key, value);
                *self = SmallMap::Many(map);
            }
            SmallMap::Many(map) => {
                map.insert(key, value);
            }
        }
        None
    }

    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        match self {
            SmallMap::Few(entries) => {
                let at = entries.iter().position(|(k, _)| k.borrow() == key)?;
                Some(entries.swap_remove(at).1)
            }
            SmallMap::Many(map) => map.remove(key),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        match self {
            SmallMap::Few(entries) => entries.len(),
            SmallMap::Many(map) => map.len(),
        }
    }

    #[cfg(any(test, feature = "gcs"))]
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            SmallMap::Few(entries) => entries.is_empty(),
            SmallMap::Many(map) => map.is_empty(),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        let (few, many) = match self {
            SmallMap::Few(entries) => (Some(entries.iter().map(|(k, v)| (k, v))), None),
            SmallMap::Many(map) => (None, Some(map.iter())),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// Takes every entry out, leaving the map empty (and small again).
    pub(crate) fn drain(&mut self) -> std::vec::IntoIter<(K, V)> {
        let entries: Vec<(K, V)> = match std::mem::take(self) {
            SmallMap::Few(entries) => entries,
            SmallMap::Many(map) => map.into_iter().collect(),
        };
        entries.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_every_entry_across_the_move_to_a_hash_table_and_back() {
        let mut map = SmallMap::default();
        for key in 0..20u64 {
            assert_eq!(map.insert(key, key * 10), None);
            assert!(matches!(map, SmallMap::Few(_)) == (key < FEW as u64));
        }
        assert_eq!(map.insert(3, 33), Some(30));
        assert_eq!(map.len(), 20);
        assert_eq!(map.get(&3), Some(&33));
        assert_eq!(map.remove(&4), Some(40));
        assert_eq!(map.remove(&4), None);
        assert!(!map.contains_key(&4));
        let mut drained: Vec<_> = map.drain().collect();
        drained.sort_unstable();
        assert_eq!(drained.len(), 19);
        assert_eq!(drained[3], (3, 33));
        assert!(map.is_empty() && matches!(map, SmallMap::Few(_)));
    }

    #[test]
    fn a_single_entry_takes_room_for_one() {
        let mut map = SmallMap::default();
        map.insert(1u64, ());
        let SmallMap::Few(entries) = &map else {
            panic!("one entry moved to a hash table")
        };
        assert_eq!(entries.capacity(), 1);
        map.remove(&1);
        assert!(map.is_empty());
    }
}
