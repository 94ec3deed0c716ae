//! A clock's rate against real time, within the documented bound ρ: what
//! the database's clock and each replica's clock share (`db.rs`, `env.rs`).

/// A clock's rate: one unit per tick slower or faster than nominal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rate {
    /// `1 − ρ`.
    Slow,
    /// Exactly real time.
    Nominal,
    /// `1 + ρ`.
    Fast,
}

impl Rate {
    /// Units this clock advances in one tick.
    pub fn step(self, units_per_tick: u16, drift: u16) -> u16 {
        match self {
            Rate::Slow => units_per_tick - drift,
            Rate::Nominal => units_per_tick,
            Rate::Fast => units_per_tick + drift,
        }
    }
}
