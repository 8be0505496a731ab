//! The engine's record store: a vector with a free list.

/// A vector with a free list: stable small indices, no allocation in steady state.
/// A freed slot keeps its stale value until reused (no `Option` to test on
/// every access); debug builds check that only live slots are touched.
pub(super) struct Slab<T> {
    pub(super) items: Vec<T>,
    pub(super) free: Vec<u32>,
    #[cfg(debug_assertions)]
    pub(super) live: Vec<bool>,
}

impl<T> Slab<T> {
    pub(super) fn new() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
            #[cfg(debug_assertions)]
            live: Vec::new(),
        }
    }
    #[inline]
    pub(super) fn insert(&mut self, v: T) -> u32 {
        let i = match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = v;
                i
            }
            None => {
                self.items.push(v);
                #[cfg(debug_assertions)]
                self.live.push(false);
                (self.items.len() - 1) as u32
            }
        };
        #[cfg(debug_assertions)]
        {
            self.live[i as usize] = true;
        }
        i
    }
    /// Frees slot `i`; read what you need from it first.
    #[inline]
    pub(super) fn free(&mut self, i: u32) {
        #[cfg(debug_assertions)]
        {
            assert!(self.live[i as usize], "slab slot {i} freed twice");
            self.live[i as usize] = false;
        }
        self.free.push(i);
    }
    #[inline]
    pub(super) fn get(&self, i: u32) -> &T {
        #[cfg(debug_assertions)]
        assert!(self.live[i as usize], "slab slot {i} not in use");
        &self.items[i as usize]
    }
    #[inline]
    pub(super) fn get_mut(&mut self, i: u32) -> &mut T {
        #[cfg(debug_assertions)]
        assert!(self.live[i as usize], "slab slot {i} not in use");
        &mut self.items[i as usize]
    }
}

impl<T: Copy> Slab<T> {
    #[inline]
    pub(super) fn remove(&mut self, i: u32) -> T {
        let v = *self.get(i);
        self.free(i);
        v
    }
}
