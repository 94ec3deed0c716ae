//! Hash maps keyed by lease keys on the runtime's hot path (the registry,
//! the tenures renewed, a claim's or release's answer looked up by key),
//! with foldhash instead of SipHash: a few times cheaper per lookup of a
//! short key. Seeded at random per process like std's, so the order of
//! keys is not predictable from outside; the keys are the service's own
//! registered names, not input chosen by an attacker.

/// A `HashMap` with foldhash's per-process random seed.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A `HashSet` with foldhash's per-process random seed.
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
