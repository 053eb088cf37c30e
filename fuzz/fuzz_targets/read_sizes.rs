//! Read sizes drawn from the input itself, so that a crash reproduces from
//! the input alone: FNV-1a of the input seeds an xorshift; each size is in
//! `1..=max`. Shared by the targets that cut a connection's bytes into reads.

pub fn read_sizes(data: &[u8], max: u64) -> impl FnMut() -> usize {
    let mut state = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    }) | 1;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        1 + (state % max) as usize
    }
}
