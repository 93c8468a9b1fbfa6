//! A moment that may not be set, in one word: [`When`] is an `Option<Nanos>` with `Nanos::MAX`
//! for `None` — 8 bytes where the `Option` takes 16. A communicator's synchronization keeps six
//! of them (since when it waits, when to repeat or probe); a simulator's million ranks hold
//! them all. `Nanos::MAX` is no moment a protocol reaches (584 years of virtual or real time),
//! and [`When::at`] refuses it in debug builds.
use crate::Nanos;

/// An optional moment (see the module doc).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct When(Nanos);

impl When {
    /// Not set.
    pub(crate) const NONE: When = When(Nanos::MAX);

    /// Set to `t`.
    pub(crate) fn at(t: Nanos) -> When {
        debug_assert!(t != Nanos::MAX, "Nanos::MAX is no moment");
        When(t)
    }

    /// As an `Option`.
    pub(crate) fn get(self) -> Option<Nanos> {
        (self.0 != Nanos::MAX).then_some(self.0)
    }

    pub(crate) fn is_some(self) -> bool {
        self.0 != Nanos::MAX
    }

    pub(crate) fn is_none(self) -> bool {
        self.0 == Nanos::MAX
    }

    pub(crate) fn is_some_and(self, f: impl FnOnce(Nanos) -> bool) -> bool {
        self.get().is_some_and(f)
    }

    pub(crate) fn unwrap_or(self, default: Nanos) -> Nanos {
        self.get().unwrap_or(default)
    }

    /// Sets it to `t` unless it is set.
    pub(crate) fn get_or_insert(&mut self, t: Nanos) {
        if self.is_none() {
            *self = When::at(t);
        }
    }
}

impl Default for When {
    fn default() -> Self {
        When::NONE
    }
}

impl core::fmt::Debug for When {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.get().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::When;

    /// Reads as the `Option<Nanos>` it replaces, in half the bytes.
    #[test]
    fn reads_as_an_option_in_one_word() {
        assert_eq!(core::mem::size_of::<When>(), 8);
        let mut w = When::default();
        assert_eq!(w.get(), None);
        assert!(w.is_none() && !w.is_some() && !w.is_some_and(|_| true));
        assert_eq!(w.unwrap_or(5), 5);
        assert_eq!(alloc::format!("{w:?}"), "None");
        w.get_or_insert(0);
        assert_eq!(w.get(), Some(0), "time 0 is a moment");
        w.get_or_insert(9);
        assert_eq!(w.get(), Some(0), "set: kept");
        assert!(w.is_some_and(|t| t == 0));
        assert_eq!(alloc::format!("{w:?}"), "Some(0)");
        assert_eq!(When::at(7).unwrap_or(5), 7);
    }
}
