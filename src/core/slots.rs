//! A slab whose ids carry a generation, so a stale id can never reach a
//! reused slot (the pattern of h2's stream store).

/// An index into [`Slots`] plus the generation it was issued for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SlotId {
    index: u32,
    generation: u32,
}

#[derive(Debug)]
struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

#[derive(Debug)]
pub(crate) struct Slots<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slots<T> {
    pub(crate) fn insert(&mut self, value: T) -> SlotId {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let entry = &mut self.entries[index as usize];
            entry.generation = entry.generation.wrapping_add(1);
            entry.value = Some(value);
            return SlotId {
                index,
                generation: entry.generation,
            };
        }
        // More than u32::MAX live entries would exhaust memory long before.
        let index = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
        self.entries.push(Entry {
            generation: 0,
            value: Some(value),
        });
        SlotId {
            index,
            generation: 0,
        }
    }

    pub(crate) fn get(&self, id: SlotId) -> Option<&T> {
        let entry = self.entries.get(id.index as usize)?;
        let live = entry.generation == id.generation;
        entry.value.as_ref().filter(|_| live)
    }

    /// The entry `id` names, unless its slot was reused since.
    fn entry_mut(&mut self, id: SlotId) -> Option<&mut Entry<T>> {
        let entry = self.entries.get_mut(id.index as usize)?;
        (entry.generation == id.generation).then_some(entry)
    }

    pub(crate) fn get_mut(&mut self, id: SlotId) -> Option<&mut T> {
        self.entry_mut(id)?.value.as_mut()
    }

    pub(crate) fn remove(&mut self, id: SlotId) -> Option<T> {
        let value = self.entry_mut(id)?.value.take()?;
        self.free.push(id.index);
        self.len -= 1;
        Some(value)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (SlotId, &T)> {
        self.entries.iter().zip(0..).filter_map(|(e, index)| {
            let id = SlotId {
                index,
                generation: e.generation,
            };
            e.value.as_ref().map(|v| (id, v))
        })
    }

    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.len = 0;
        self.free = (0..self.entries.len() as u32).collect();
        self.entries
            .iter_mut()
            .filter_map(|e| e.value.take())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_id_cannot_reach_a_reused_slot() {
        let mut slots = Slots::default();
        let a = slots.insert("a");
        assert_eq!(slots.remove(a), Some("a"));
        let b = slots.insert("b");
        assert_eq!(slots.get(a), None);
        assert_eq!(slots.remove(a), None);
        assert_eq!(slots.get(b), Some(&"b"));
        assert_eq!(slots.len(), 1);
    }

    #[test]
    fn drain_empties_and_keeps_slots_reusable() {
        let mut slots = Slots::default();
        let a = slots.insert(1);
        slots.insert(2);
        assert_eq!(slots.drain().len(), 2);
        assert_eq!(slots.len(), 0);
        assert_eq!(slots.get(a), None);
        let c = slots.insert(3);
        assert_eq!(slots.get(c), Some(&3));
        assert_ne!(a, c);
    }
}
