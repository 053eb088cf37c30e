//! The HPACK Huffman code (RFC 7541 §5.2, Appendix B): encoding and its
//! length, and a table-driven decoder that reads a whole code per step.
//!
//! The decoder keeps the unread bits in a 64-bit word and looks their first
//! `PEEK_BITS` up in `SHORT`, which names the symbol and length of every
//! code that short (the characters of URLs, hosts and most field values);
//! a longer code is found by length in the canonical code (`CANONICAL`:
//! RFC 7541's code is canonical, codes of one length consecutive in symbol
//! order). Both tables are built at compile time from `CODES` by `const
//! fn`s whose assertions make a table typo (a code out of canonical order,
//! an incomplete code) a build error.

use super::Error;

/// `(code, bit length)` of every symbol, byte values 0 to 255 then EOS
/// (256), as RFC 7541 Appendix B lists them; codes are right-aligned.
const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13),     // (  0)     |11111111|11000
    (0x7fffd8, 23),   // (  1)     |11111111|11111111|1011000
    (0xfffffe2, 28),  // (  2)     |11111111|11111111|11111110|0010
    (0xfffffe3, 28),  // (  3)     |11111111|11111111|11111110|0011
    (0xfffffe4, 28),  // (  4)     |11111111|11111111|11111110|0100
    (0xfffffe5, 28),  // (  5)     |11111111|11111111|11111110|0101
    (0xfffffe6, 28),  // (  6)     |11111111|11111111|11111110|0110
    (0xfffffe7, 28),  // (  7)     |11111111|11111111|11111110|0111
    (0xfffffe8, 28),  // (  8)     |11111111|11111111|11111110|1000
    (0xffffea, 24),   // (  9)     |11111111|11111111|11101010
    (0x3ffffffc, 30), // ( 10)     |11111111|11111111|11111111|111100
    (0xfffffe9, 28),  // ( 11)     |11111111|11111111|11111110|1001
    (0xfffffea, 28),  // ( 12)     |11111111|11111111|11111110|1010
    (0x3ffffffd, 30), // ( 13)     |11111111|11111111|11111111|111101
    (0xfffffeb, 28),  // ( 14)     |11111111|11111111|11111110|1011
    (0xfffffec, 28),  // ( 15)     |11111111|11111111|11111110|1100
    (0xfffffed, 28),  // ( 16)     |11111111|11111111|11111110|1101
    (0xfffffee, 28),  // ( 17)     |11111111|11111111|11111110|1110
    (0xfffffef, 28),  // ( 18)     |11111111|11111111|11111110|1111
    (0xffffff0, 28),  // ( 19)     |11111111|11111111|11111111|0000
    (0xffffff1, 28),  // ( 20)     |11111111|11111111|11111111|0001
    (0xffffff2, 28),  // ( 21)     |11111111|11111111|11111111|0010
    (0x3ffffffe, 30), // ( 22)     |11111111|11111111|11111111|111110
    (0xffffff3, 28),  // ( 23)     |11111111|11111111|11111111|0011
    (0xffffff4, 28),  // ( 24)     |11111111|11111111|11111111|0100
    (0xffffff5, 28),  // ( 25)     |11111111|11111111|11111111|0101
    (0xffffff6, 28),  // ( 26)     |11111111|11111111|11111111|0110
    (0xffffff7, 28),  // ( 27)     |11111111|11111111|11111111|0111
    (0xffffff8, 28),  // ( 28)     |11111111|11111111|11111111|1000
    (0xffffff9, 28),  // ( 29)     |11111111|11111111|11111111|1001
    (0xffffffa, 28),  // ( 30)     |11111111|11111111|11111111|1010
    (0xffffffb, 28),  // ( 31)     |11111111|11111111|11111111|1011
    (0x14, 6),        // ( 32) ' ' |010100
    (0x3f8, 10),      // ( 33) '!' |11111110|00
    (0x3f9, 10),      // ( 34) '"' |11111110|01
    (0xffa, 12),      // ( 35) '#' |11111111|1010
    (0x1ff9, 13),     // ( 36) '$' |11111111|11001
    (0x15, 6),        // ( 37) '%' |010101
    (0xf8, 8),        // ( 38) '&' |11111000
    (0x7fa, 11),      // ( 39) ''' |11111111|010
    (0x3fa, 10),      // ( 40) '(' |11111110|10
    (0x3fb, 10),      // ( 41) ')' |11111110|11
    (0xf9, 8),        // ( 42) '*' |11111001
    (0x7fb, 11),      // ( 43) '+' |11111111|011
    (0xfa, 8),        // ( 44) ',' |11111010
    (0x16, 6),        // ( 45) '-' |010110
    (0x17, 6),        // ( 46) '.' |010111
    (0x18, 6),        // ( 47) '/' |011000
    (0x0, 5),         // ( 48) '0' |00000
    (0x1, 5),         // ( 49) '1' |00001
    (0x2, 5),         // ( 50) '2' |00010
    (0x19, 6),        // ( 51) '3' |011001
    (0x1a, 6),        // ( 52) '4' |011010
    (0x1b, 6),        // ( 53) '5' |011011
    (0x1c, 6),        // ( 54) '6' |011100
    (0x1d, 6),        // ( 55) '7' |011101
    (0x1e, 6),        // ( 56) '8' |011110
    (0x1f, 6),        // ( 57) '9' |011111
    (0x5c, 7),        // ( 58) ':' |1011100
    (0xfb, 8),        // ( 59) ';' |11111011
    (0x7ffc, 15),     // ( 60) '<' |11111111|1111100
    (0x20, 6),        // ( 61) '=' |100000
    (0xffb, 12),      // ( 62) '>' |11111111|1011
    (0x3fc, 10),      // ( 63) '?' |11111111|00
    (0x1ffa, 13),     // ( 64) '@' |11111111|11010
    (0x21, 6),        // ( 65) 'A' |100001
    (0x5d, 7),        // ( 66) 'B' |1011101
    (0x5e, 7),        // ( 67) 'C' |1011110
    (0x5f, 7),        // ( 68) 'D' |1011111
    (0x60, 7),        // ( 69) 'E' |1100000
    (0x61, 7),        // ( 70) 'F' |1100001
    (0x62, 7),        // ( 71) 'G' |1100010
    (0x63, 7),        // ( 72) 'H' |1100011
    (0x64, 7),        // ( 73) 'I' |1100100
    (0x65, 7),        // ( 74) 'J' |1100101
    (0x66, 7),        // ( 75) 'K' |1100110
    (0x67, 7),        // ( 76) 'L' |1100111
    (0x68, 7),        // ( 77) 'M' |1101000
    (0x69, 7),        // ( 78) 'N' |1101001
    (0x6a, 7),        // ( 79) 'O' |1101010
    (0x6b, 7),        // ( 80) 'P' |1101011
    (0x6c, 7),        // ( 81) 'Q' |1101100
    (0x6d, 7),        // ( 82) 'R' |1101101
    (0x6e, 7),        // ( 83) 'S' |1101110
    (0x6f, 7),        // ( 84) 'T' |1101111
    (0x70, 7),        // ( 85) 'U' |1110000
    (0x71, 7),        // ( 86) 'V' |1110001
    (0x72, 7),        // ( 87) 'W' |1110010
    (0xfc, 8),        // ( 88) 'X' |11111100
    (0x73, 7),        // ( 89) 'Y' |1110011
    (0xfd, 8),        // ( 90) 'Z' |11111101
    (0x1ffb, 13),     // ( 91) '[' |11111111|11011
    (0x7fff0, 19),    // ( 92) '\' |11111111|11111110|000
    (0x1ffc, 13),     // ( 93) ']' |11111111|11100
    (0x3ffc, 14),     // ( 94) '^' |11111111|111100
    (0x22, 6),        // ( 95) '_' |100010
    (0x7ffd, 15),     // ( 96) '`' |11111111|1111101
    (0x3, 5),         // ( 97) 'a' |00011
    (0x23, 6),        // ( 98) 'b' |100011
    (0x4, 5),         // ( 99) 'c' |00100
    (0x24, 6),        // (100) 'd' |100100
    (0x5, 5),         // (101) 'e' |00101
    (0x25, 6),        // (102) 'f' |100101
    (0x26, 6),        // (103) 'g' |100110
    (0x27, 6),        // (104) 'h' |100111
    (0x6, 5),         // (105) 'i' |00110
    (0x74, 7),        // (106) 'j' |1110100
    (0x75, 7),        // (107) 'k' |1110101
    (0x28, 6),        // (108) 'l' |101000
    (0x29, 6),        // (109) 'm' |101001
    (0x2a, 6),        // (110) 'n' |101010
    (0x7, 5),         // (111) 'o' |00111
    (0x2b, 6),        // (112) 'p' |101011
    (0x76, 7),        // (113) 'q' |1110110
    (0x2c, 6),        // (114) 'r' |101100
    (0x8, 5),         // (115) 's' |01000
    (0x9, 5),         // (116) 't' |01001
    (0x2d, 6),        // (117) 'u' |101101
    (0x77, 7),        // (118) 'v' |1110111
    (0x78, 7),        // (119) 'w' |1111000
    (0x79, 7),        // (120) 'x' |1111001
    (0x7a, 7),        // (121) 'y' |1111010
    (0x7b, 7),        // (122) 'z' |1111011
    (0x7ffe, 15),     // (123) '{' |11111111|1111110
    (0x7fc, 11),      // (124) '|' |11111111|100
    (0x3ffd, 14),     // (125) '}' |11111111|111101
    (0x1ffd, 13),     // (126) '~' |11111111|11101
    (0xffffffc, 28),  // (127)     |11111111|11111111|11111111|1100
    (0xfffe6, 20),    // (128)     |11111111|11111110|0110
    (0x3fffd2, 22),   // (129)     |11111111|11111111|010010
    (0xfffe7, 20),    // (130)     |11111111|11111110|0111
    (0xfffe8, 20),    // (131)     |11111111|11111110|1000
    (0x3fffd3, 22),   // (132)     |11111111|11111111|010011
    (0x3fffd4, 22),   // (133)     |11111111|11111111|010100
    (0x3fffd5, 22),   // (134)     |11111111|11111111|010101
    (0x7fffd9, 23),   // (135)     |11111111|11111111|1011001
    (0x3fffd6, 22),   // (136)     |11111111|11111111|010110
    (0x7fffda, 23),   // (137)     |11111111|11111111|1011010
    (0x7fffdb, 23),   // (138)     |11111111|11111111|1011011
    (0x7fffdc, 23),   // (139)     |11111111|11111111|1011100
    (0x7fffdd, 23),   // (140)     |11111111|11111111|1011101
    (0x7fffde, 23),   // (141)     |11111111|11111111|1011110
    (0xffffeb, 24),   // (142)     |11111111|11111111|11101011
    (0x7fffdf, 23),   // (143)     |11111111|11111111|1011111
    (0xffffec, 24),   // (144)     |11111111|11111111|11101100
    (0xffffed, 24),   // (145)     |11111111|11111111|11101101
    (0x3fffd7, 22),   // (146)     |11111111|11111111|010111
    (0x7fffe0, 23),   // (147)     |11111111|11111111|1100000
    (0xffffee, 24),   // (148)     |11111111|11111111|11101110
    (0x7fffe1, 23),   // (149)     |11111111|11111111|1100001
    (0x7fffe2, 23),   // (150)     |11111111|11111111|1100010
    (0x7fffe3, 23),   // (151)     |11111111|11111111|1100011
    (0x7fffe4, 23),   // (152)     |11111111|11111111|1100100
    (0x1fffdc, 21),   // (153)     |11111111|11111110|11100
    (0x3fffd8, 22),   // (154)     |11111111|11111111|011000
    (0x7fffe5, 23),   // (155)     |11111111|11111111|1100101
    (0x3fffd9, 22),   // (156)     |11111111|11111111|011001
    (0x7fffe6, 23),   // (157)     |11111111|11111111|1100110
    (0x7fffe7, 23),   // (158)     |11111111|11111111|1100111
    (0xffffef, 24),   // (159)     |11111111|11111111|11101111
    (0x3fffda, 22),   // (160)     |11111111|11111111|011010
    (0x1fffdd, 21),   // (161)     |11111111|11111110|11101
    (0xfffe9, 20),    // (162)     |11111111|11111110|1001
    (0x3fffdb, 22),   // (163)     |11111111|11111111|011011
    (0x3fffdc, 22),   // (164)     |11111111|11111111|011100
    (0x7fffe8, 23),   // (165)     |11111111|11111111|1101000
    (0x7fffe9, 23),   // (166)     |11111111|11111111|1101001
    (0x1fffde, 21),   // (167)     |11111111|11111110|11110
    (0x7fffea, 23),   // (168)     |11111111|11111111|1101010
    (0x3fffdd, 22),   // (169)     |11111111|11111111|011101
    (0x3fffde, 22),   // (170)     |11111111|11111111|011110
    (0xfffff0, 24),   // (171)     |11111111|11111111|11110000
    (0x1fffdf, 21),   // (172)     |11111111|11111110|11111
    (0x3fffdf, 22),   // (173)     |11111111|11111111|011111
    (0x7fffeb, 23),   // (174)     |11111111|11111111|1101011
    (0x7fffec, 23),   // (175)     |11111111|11111111|1101100
    (0x1fffe0, 21),   // (176)     |11111111|11111111|00000
    (0x1fffe1, 21),   // (177)     |11111111|11111111|00001
    (0x3fffe0, 22),   // (178)     |11111111|11111111|100000
    (0x1fffe2, 21),   // (179)     |11111111|11111111|00010
    (0x7fffed, 23),   // (180)     |11111111|11111111|1101101
    (0x3fffe1, 22),   // (181)     |11111111|11111111|100001
    (0x7fffee, 23),   // (182)     |11111111|11111111|1101110
    (0x7fffef, 23),   // (183)     |11111111|11111111|1101111
    (0xfffea, 20),    // (184)     |11111111|11111110|1010
    (0x3fffe2, 22),   // (185)     |11111111|11111111|100010
    (0x3fffe3, 22),   // (186)     |11111111|11111111|100011
    (0x3fffe4, 22),   // (187)     |11111111|11111111|100100
    (0x7ffff0, 23),   // (188)     |11111111|11111111|1110000
    (0x3fffe5, 22),   // (189)     |11111111|11111111|100101
    (0x3fffe6, 22),   // (190)     |11111111|11111111|100110
    (0x7ffff1, 23),   // (191)     |11111111|11111111|1110001
    (0x3ffffe0, 26),  // (192)     |11111111|11111111|11111000|00
    (0x3ffffe1, 26),  // (193)     |11111111|11111111|11111000|01
    (0xfffeb, 20),    // (194)     |11111111|11111110|1011
    (0x7fff1, 19),    // (195)     |11111111|11111110|001
    (0x3fffe7, 22),   // (196)     |11111111|11111111|100111
    (0x7ffff2, 23),   // (197)     |11111111|11111111|1110010
    (0x3fffe8, 22),   // (198)     |11111111|11111111|101000
    (0x1ffffec, 25),  // (199)     |11111111|11111111|11110110|0
    (0x3ffffe2, 26),  // (200)     |11111111|11111111|11111000|10
    (0x3ffffe3, 26),  // (201)     |11111111|11111111|11111000|11
    (0x3ffffe4, 26),  // (202)     |11111111|11111111|11111001|00
    (0x7ffffde, 27),  // (203)     |11111111|11111111|11111011|110
    (0x7ffffdf, 27),  // (204)     |11111111|11111111|11111011|111
    (0x3ffffe5, 26),  // (205)     |11111111|11111111|11111001|01
    (0xfffff1, 24),   // (206)     |11111111|11111111|11110001
    (0x1ffffed, 25),  // (207)     |11111111|11111111|11110110|1
    (0x7fff2, 19),    // (208)     |11111111|11111110|010
    (0x1fffe3, 21),   // (209)     |11111111|11111111|00011
    (0x3ffffe6, 26),  // (210)     |11111111|11111111|11111001|10
    (0x7ffffe0, 27),  // (211)     |11111111|11111111|11111100|000
    (0x7ffffe1, 27),  // (212)     |11111111|11111111|11111100|001
    (0x3ffffe7, 26),  // (213)     |11111111|11111111|11111001|11
    (0x7ffffe2, 27),  // (214)     |11111111|11111111|11111100|010
    (0xfffff2, 24),   // (215)     |11111111|11111111|11110010
    (0x1fffe4, 21),   // (216)     |11111111|11111111|00100
    (0x1fffe5, 21),   // (217)     |11111111|11111111|00101
    (0x3ffffe8, 26),  // (218)     |11111111|11111111|11111010|00
    (0x3ffffe9, 26),  // (219)     |11111111|11111111|11111010|01
    (0xffffffd, 28),  // (220)     |11111111|11111111|11111111|1101
    (0x7ffffe3, 27),  // (221)     |11111111|11111111|11111100|011
    (0x7ffffe4, 27),  // (222)     |11111111|11111111|11111100|100
    (0x7ffffe5, 27),  // (223)     |11111111|11111111|11111100|101
    (0xfffec, 20),    // (224)     |11111111|11111110|1100
    (0xfffff3, 24),   // (225)     |11111111|11111111|11110011
    (0xfffed, 20),    // (226)     |11111111|11111110|1101
    (0x1fffe6, 21),   // (227)     |11111111|11111111|00110
    (0x3fffe9, 22),   // (228)     |11111111|11111111|101001
    (0x1fffe7, 21),   // (229)     |11111111|11111111|00111
    (0x1fffe8, 21),   // (230)     |11111111|11111111|01000
    (0x7ffff3, 23),   // (231)     |11111111|11111111|1110011
    (0x3fffea, 22),   // (232)     |11111111|11111111|101010
    (0x3fffeb, 22),   // (233)     |11111111|11111111|101011
    (0x1ffffee, 25),  // (234)     |11111111|11111111|11110111|0
    (0x1ffffef, 25),  // (235)     |11111111|11111111|11110111|1
    (0xfffff4, 24),   // (236)     |11111111|11111111|11110100
    (0xfffff5, 24),   // (237)     |11111111|11111111|11110101
    (0x3ffffea, 26),  // (238)     |11111111|11111111|11111010|10
    (0x7ffff4, 23),   // (239)     |11111111|11111111|1110100
    (0x3ffffeb, 26),  // (240)     |11111111|11111111|11111010|11
    (0x7ffffe6, 27),  // (241)     |11111111|11111111|11111100|110
    (0x3ffffec, 26),  // (242)     |11111111|11111111|11111011|00
    (0x3ffffed, 26),  // (243)     |11111111|11111111|11111011|01
    (0x7ffffe7, 27),  // (244)     |11111111|11111111|11111100|111
    (0x7ffffe8, 27),  // (245)     |11111111|11111111|11111101|000
    (0x7ffffe9, 27),  // (246)     |11111111|11111111|11111101|001
    (0x7ffffea, 27),  // (247)     |11111111|11111111|11111101|010
    (0x7ffffeb, 27),  // (248)     |11111111|11111111|11111101|011
    (0xffffffe, 28),  // (249)     |11111111|11111111|11111111|1110
    (0x7ffffec, 27),  // (250)     |11111111|11111111|11111101|100
    (0x7ffffed, 27),  // (251)     |11111111|11111111|11111101|101
    (0x7ffffee, 27),  // (252)     |11111111|11111111|11111101|110
    (0x7ffffef, 27),  // (253)     |11111111|11111111|11111101|111
    (0x7fffff0, 27),  // (254)     |11111111|11111111|11111110|000
    (0x3ffffee, 26),  // (255)     |11111111|11111111|11111011|10
    (0x3fffffff, 30), // (256) EOS |11111111|11111111|11111111|111111
];

/// The end-of-string symbol: never sent inside a string (§5.2).
const EOS: u16 = 256;

/// Bits the first lookup reads: a code this short or shorter is decoded in
/// one step.
const PEEK_BITS: u32 = 10;
/// The longest code (EOS and a few control bytes).
const MAX_LEN: usize = 30;

/// The code by length, as a canonical code is decoded.
struct Canonical {
    /// For each length, its first code (right-aligned).
    first: [u32; MAX_LEN + 1],
    /// For each length, how many codes have it.
    count: [u32; MAX_LEN + 1],
    /// For each length, where its symbols start in `symbols`.
    offset: [u16; MAX_LEN + 1],
    /// The symbols by (length, symbol).
    symbols: [u16; 257],
}

const fn build_canonical() -> Canonical {
    let mut c = Canonical {
        first: [0; MAX_LEN + 1],
        count: [0; MAX_LEN + 1],
        offset: [0; MAX_LEN + 1],
        symbols: [0; 257],
    };
    let mut symbol = 0;
    while symbol < CODES.len() {
        let len = CODES[symbol].1 as usize;
        assert!(len >= 5 && len <= MAX_LEN, "a code length out of range");
        c.count[len] += 1;
        symbol += 1;
    }
    let mut code = 0u32;
    let mut placed = 0;
    let mut kraft = 0u64;
    let mut len = 1;
    while len <= MAX_LEN {
        code = (code + c.count[len - 1]) << 1;
        c.first[len] = code;
        c.offset[len] = placed as u16;
        kraft += (c.count[len] as u64) << (MAX_LEN - len);
        let mut symbol = 0;
        let mut rank = 0;
        while symbol < CODES.len() {
            if CODES[symbol].1 as usize == len {
                assert!(
                    CODES[symbol].0 == code + rank,
                    "a code out of canonical order"
                );
                c.symbols[placed] = symbol as u16;
                placed += 1;
                rank += 1;
            }
            symbol += 1;
        }
        len += 1;
    }
    assert!(kraft == 1 << MAX_LEN, "the code is not complete");
    c
}

/// For each value of the next `PEEK_BITS` bits, the code they start with
/// when it is at most that long: `symbol | length << 9`; 0 when longer.
const fn build_short() -> [u16; 1 << PEEK_BITS] {
    let mut short = [0u16; 1 << PEEK_BITS];
    let mut symbol = 0;
    while symbol < CODES.len() {
        let (code, len) = CODES[symbol];
        if len as u32 <= PEEK_BITS {
            let spare = PEEK_BITS - len as u32;
            let base = (code << spare) as usize;
            let mut i = 0;
            while i < 1 << spare {
                assert!(short[base + i] == 0, "a code is a prefix of another");
                short[base + i] = symbol as u16 | (len as u16) << 9;
                i += 1;
            }
        }
        symbol += 1;
    }
    short
}

static CANONICAL: Canonical = build_canonical();
/// 2 KiB, small enough to stay cached.
static SHORT: [u16; 1 << PEEK_BITS] = build_short();

/// The symbol and length of the code longer than `PEEK_BITS` at the top of
/// `bits` (left-aligned); the code being complete, every bit string
/// starts with one.
fn long_code(bits: u64) -> (u16, u32) {
    let c = &CANONICAL;
    let mut len = PEEK_BITS as usize + 1;
    while len < MAX_LEN {
        let code = (bits >> (64 - len)) as u32;
        let rank = code.wrapping_sub(c.first[len]);
        if rank < c.count[len] {
            return (
                c.symbols[usize::from(c.offset[len]) + rank as usize],
                len as u32,
            );
        }
        len += 1;
    }
    let rank = (bits >> (64 - MAX_LEN)) as u32 - c.first[MAX_LEN];
    (
        c.symbols[usize::from(c.offset[MAX_LEN]) + rank as usize],
        MAX_LEN as u32,
    )
}

/// Decodes `src`, handing each symbol to `emit`; then checks the padding:
/// the bits after the last code must be a prefix of EOS (ones) shorter
/// than 8 (§5.2). EOS itself is an error.
fn walk(src: &[u8], mut emit: impl FnMut(u8)) -> Result<(), Error> {
    // The unread bits, left-aligned, and how many there are.
    let mut word = 0u64;
    let mut bits = 0u32;
    let mut rest = src;
    loop {
        // At least 33 bits once `src` has them: a whole code of any length.
        if bits <= 32 {
            if let Some((four, tail)) = rest.split_first_chunk::<4>() {
                word |= u64::from(u32::from_be_bytes(*four)) << (32 - bits);
                bits += 32;
                rest = tail;
            } else {
                while let Some((&byte, tail)) = rest.split_first() {
                    word |= u64::from(byte) << (56 - bits);
                    bits += 8;
                    rest = tail;
                }
            }
        }
        let short = SHORT[(word >> (64 - PEEK_BITS)) as usize];
        let (symbol, len) = if short != 0 {
            (short as u8, u32::from(short >> 9))
        } else {
            let (symbol, len) = long_code(word);
            if symbol == EOS && len <= bits {
                return Err(Error::HuffmanEos);
            }
            (symbol as u8, len)
        };
        // Past the end of `src` the word holds zeros: a code longer than
        // the bits left means the string ended inside one, as padding.
        if len > bits {
            break;
        }
        emit(symbol);
        word <<= len;
        bits -= len;
    }
    if (!word).leading_zeros() < bits {
        Err(Error::HuffmanPaddingNotOnes)
    } else if bits > 7 {
        Err(Error::HuffmanPaddingTooLong)
    } else {
        Ok(())
    }
}

/// Most bytes `encoded_len` Huffman-coded bytes can decode to: every code is
/// at least 5 bits long.
pub(super) fn max_decoded_len(encoded_len: usize) -> usize {
    encoded_len.saturating_mul(8) / 5
}

/// Decodes `src`, appending to `out` at most `cap` bytes. Returns whether
/// the whole string fit; a string that does not fit is still decoded to its
/// end, so that every error in it is found, but the rest is not stored.
///
/// `out` grows at most once, by at most `min(cap, max_decoded_len)`: a
/// reused buffer stops growing once warm.
pub(super) fn decode(src: &[u8], out: &mut Vec<u8>, cap: usize) -> Result<bool, Error> {
    let room = cap.min(max_decoded_len(src.len()));
    let start = out.len();
    out.resize(start + room, 0);
    let slots = &mut out[start..];
    let mut decoded = 0usize;
    let walked = walk(src, |symbol| {
        if let Some(slot) = slots.get_mut(decoded) {
            *slot = symbol;
        }
        decoded += 1;
    });
    out.truncate(start + decoded.min(room));
    walked?;
    Ok(decoded <= room)
}

/// How many bytes `src` decodes to, checked as `decode` checks it; stores
/// nothing.
pub(super) fn decoded_len(src: &[u8]) -> Result<usize, Error> {
    let mut len = 0;
    walk(src, |_| len += 1)?;
    Ok(len)
}

/// Length in bytes of the Huffman coding of `bytes`, padding included.
pub(super) fn encoded_len(bytes: impl Iterator<Item = u8>) -> usize {
    let bits: usize = bytes.map(|b| usize::from(CODES[usize::from(b)].1)).sum();
    bits.div_ceil(8)
}

/// Appends the Huffman coding of `bytes`, padded with the most significant
/// bits of EOS (ones) to a whole byte.
pub(super) fn encode(bytes: impl Iterator<Item = u8>, out: &mut Vec<u8>) {
    // Bits not written yet sit at the bottom of `pending`; at most 7 are
    // left after each symbol, plus at most 30 of the next code: 37 < 64.
    let mut pending: u64 = 0;
    let mut pending_bits = 0u32;
    for byte in bytes {
        let (code, len) = CODES[usize::from(byte)];
        pending = (pending << len) | u64::from(code);
        pending_bits += u32::from(len);
        while pending_bits >= 8 {
            pending_bits -= 8;
            out.push((pending >> pending_bits) as u8);
        }
    }
    if pending_bits > 0 {
        let pad = 8 - pending_bits;
        out.push(((pending << pad) as u8) | (0xff >> pending_bits));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::hex;
    use super::*;

    /// A small deterministic generator, so that failures reproduce.
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    fn encoded(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(bytes.iter().copied(), &mut out);
        assert_eq!(out.len(), encoded_len(bytes.iter().copied()));
        out
    }

    fn decoded(src: &[u8]) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        let fits = decode(src, &mut out, usize::MAX)?;
        assert!(fits);
        Ok(out)
    }

    /// The table is the canonical code of its lengths (RFC 7541's code is
    /// canonical: codes of one length are consecutive, in symbol order, and
    /// follow the last shorter code), so a typo in any one code shows here;
    /// and it is complete (Kraft sum exactly 1), which `build_canonical`
    /// also checks at compile time.
    #[test]
    fn code_table_is_the_canonical_complete_code() {
        let mut order: Vec<usize> = (0..257).collect();
        order.sort_by_key(|&s| (CODES[s].1, s));
        let mut code = 0u64;
        let mut prev_len = CODES[order[0]].1;
        for (i, &s) in order.iter().enumerate() {
            let len = CODES[s].1;
            if i > 0 {
                code = (code + 1) << (len - prev_len);
                prev_len = len;
            }
            assert_eq!(u64::from(CODES[s].0), code, "symbol {s}");
        }
        let kraft: u64 = CODES.iter().map(|&(_, len)| 1u64 << (30 - len)).sum();
        assert_eq!(kraft, 1 << 30);
    }

    /// A few rows of Appendix B, as printed there.
    #[test]
    fn code_table_matches_appendix_b_rows() {
        let rows: [(usize, u32, u8); 12] = [
            (0, 0x1ff8, 13),
            (10, 0x3ffffffc, 30),
            (b' ' as usize, 0x14, 6),
            (b'0' as usize, 0x0, 5),
            (b'a' as usize, 0x3, 5),
            (b'e' as usize, 0x5, 5),
            (b'A' as usize, 0x21, 6),
            (b'Z' as usize, 0xfd, 8),
            (b'~' as usize, 0x1ffd, 13),
            (127, 0xffffffc, 28),
            (255, 0x3ffffee, 26),
            (256, 0x3fffffff, 30),
        ];
        for (symbol, code, len) in rows {
            assert_eq!(CODES[symbol], (code, len), "symbol {symbol}");
        }
    }

    /// Strings Huffman-coded in RFC 7541 Appendix C.4 and C.6.
    #[test]
    fn rfc_examples_encode_and_decode() {
        let examples: [(&str, &str); 10] = [
            ("www.example.com", "f1e3 c2e5 f23a 6ba0 ab90 f4ff"),
            ("no-cache", "a8eb 1064 9cbf"),
            ("custom-key", "25a8 49e9 5ba9 7d7f"),
            ("custom-value", "25a8 49e9 5bb8 e8b4 bf"),
            ("302", "6402"),
            ("private", "aec3 771a 4b"),
            (
                "Mon, 21 Oct 2013 20:13:21 GMT",
                "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff",
            ),
            (
                "https://www.example.com",
                "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3",
            ),
            ("gzip", "9bd9 ab"),
            (
                "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
                "94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 \
                 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ),
        ];
        for (text, code) in examples {
            assert_eq!(encoded(text.as_bytes()), hex(code), "{text}");
            assert_eq!(decoded(&hex(code)).unwrap(), text.as_bytes(), "{text}");
        }
    }

    #[test]
    fn every_byte_value_round_trips() {
        for b in 0..=255u8 {
            for len in [1, 2, 3, 7, 8] {
                let s = vec![b; len];
                assert_eq!(decoded(&encoded(&s)).unwrap(), s, "byte {b} × {len}");
            }
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decoded(&encoded(&all)).unwrap(), all);
    }

    #[test]
    fn random_strings_round_trip() {
        let mut rng = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            let len = (xorshift(&mut rng) % 64) as usize;
            let s: Vec<u8> = (0..len).map(|_| xorshift(&mut rng) as u8).collect();
            assert_eq!(decoded(&encoded(&s)).unwrap(), s);
            // Mostly-ASCII strings too, where short codes meet long ones.
            let t: Vec<u8> = (0..len)
                .map(|_| b' ' + (xorshift(&mut rng) % 95) as u8)
                .collect();
            assert_eq!(decoded(&encoded(&t)).unwrap(), t);
        }
    }

    #[test]
    fn empty_string() {
        assert_eq!(encoded(b""), b"");
        assert_eq!(decoded(b"").unwrap(), b"");
    }

    #[test]
    fn eos_in_a_string_is_an_error() {
        // EOS is 30 ones: four bytes of ones contain it.
        assert_eq!(decoded(&[0xff; 4]), Err(Error::HuffmanEos));
        // After a symbol ('0' = 00000), still an error.
        assert_eq!(
            decoded(&[0x07, 0xff, 0xff, 0xff, 0xff]),
            Err(Error::HuffmanEos)
        );
    }

    #[test]
    fn padding_of_eight_or_more_bits_is_an_error() {
        // 'a' (00011) then 3 bits of padding: fine; a whole byte more: not.
        assert_eq!(decoded(&[0x1f]).unwrap(), b"a");
        assert_eq!(decoded(&[0x1f, 0xff]), Err(Error::HuffmanPaddingTooLong));
        // A byte of ones alone is 8 bits of padding.
        assert_eq!(decoded(&[0xff]), Err(Error::HuffmanPaddingTooLong));
    }

    #[test]
    fn padding_that_is_not_ones_is_an_error() {
        // 'a' (00011) then 000: a prefix of a real code, not of EOS.
        assert_eq!(decoded(&[0x18]), Err(Error::HuffmanPaddingNotOnes));
        // 'a' then 101.
        assert_eq!(decoded(&[0x1d]), Err(Error::HuffmanPaddingNotOnes));
    }

    #[test]
    fn output_is_capped_but_the_whole_string_is_checked() {
        let code = encoded(b"www.example.com");
        let mut out = b"kept".to_vec();
        assert_eq!(decode(&code, &mut out, 3), Ok(false));
        assert_eq!(out, b"keptwww");
        // An error after the cap is still found.
        let mut bad = code.clone();
        bad.push(0xff);
        assert_eq!(
            decode(&bad, &mut Vec::new(), 3),
            Err(Error::HuffmanPaddingTooLong)
        );
        assert_eq!(decode(&code, &mut Vec::new(), 0), Ok(false));
        let mut exact = Vec::new();
        assert_eq!(decode(&code, &mut exact, 15), Ok(true));
        assert_eq!(exact, b"www.example.com");
    }

    #[test]
    fn decoded_length_never_exceeds_the_bound() {
        // The shortest codes (5 bits) give the most symbols per byte.
        let s = vec![b'0'; 80];
        let code = encoded(&s);
        assert_eq!(code.len(), 50);
        assert_eq!(max_decoded_len(code.len()), 80);
        let mut out = Vec::new();
        assert_eq!(decode(&code, &mut out, usize::MAX), Ok(true));
        assert_eq!(out.capacity(), 80);
    }
}
