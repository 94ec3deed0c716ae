//! What a real service does to the library: shares its pool (and leaves
//! connections inside transactions), copies configurations (duplicate
//! holder ids), drops handles, exhausts its own pool, locks lease rows.
//! One file per fault, each in both connection modes of the runtime
//! where the mode matters.

mod cancel_safety;
mod dropped_handle;
mod duplicate_holder;
mod late_claim;
mod poisoned_pool;
mod pool_exhaustion;
mod terminated_backends;
mod wedged_heartbeat;
