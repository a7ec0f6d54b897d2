//! What the tests that check this crate against an independent
//! implementation share: the key they start from and hex decoding.

use crate::schedule::Key;

/// The key the vectors were computed from: bytes 1 to 32.
pub const KEY_1_TO_32: Key = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
    27, 28, 29, 30, 31, 32,
];

/// The bytes of a hex string.
pub fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
