//! `leasehold`: the operator CLI (work in progress).
fn main() {}
