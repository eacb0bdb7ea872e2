use super::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

const KEY: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
const NONCE: [u8; 12] = [0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];

/// AES-128-GCM tags with an empty plaintext and this data as the
/// associated data, from an independent implementation (Python's
/// `cryptography`, `AESGCM(KEY).encrypt(NONCE, b"", aad)`). 1024 bytes
/// are one round of the 512-bit path; 20000 three rounds of each path
/// and tails.
const VECTORS: [(usize, &str); 17] = [
    (0, "4b4b5e01f7c0a49d9a2dd6e091212ec7"),
    (1, "1e336fc34290afb3e93cf156d1c7775f"),
    (15, "a30833e98334f17a0d1da97dfb48b050"),
    (16, "15c07b43ea12d458e0edb744bb944cf1"),
    (17, "51fe1cf2793a2fde097c11b84ad69490"),
    (63, "36ee5374b94c2c22cce4db778027b0cf"),
    (64, "136561e4dc14e7214a845719f4cab756"),
    (100, "c0f6921b3dcf1a80db20dc2b52dc17e4"),
    (129, "ee2c450bab94798ab09c7beef2c0631b"),
    (1000, "86debe804fd499edeb4a1084b12fb418"),
    (1023, "a72ea64caa3fa313b3d37d5da07d9701"),
    (1024, "17c98db8f84d9a988ce99f13f70ab16a"),
    (1025, "9e1802e3256083feff3657496cdf400e"),
    (4096, "b69be754592a60d6c354c1ccb71def56"),
    (9000, "e7a2ce65062aa1823d3ef36b9c1a1e76"),
    (9024, "d4302a83c3cdb121e58d416d8bbec562"),
    (20000, "8c98f05ca10acdeb210c45ed6419594c"),
];

/// Every implementation this CPU runs, named: the portable one and each
/// hardware width up to the widest (the one [`Gmac::new`] chooses).
fn backends(key: &[u8; 16]) -> Vec<(String, Gmac)> {
    let mut all = vec![("portable".to_string(), Gmac::portable(key))];
    #[cfg(target_arch = "x86_64")]
    if let Backend::Hw(k) = &Gmac::new(key).backend {
        for width in hw::Width::all() {
            let mut k = k.clone();
            k.width = width;
            all.push((
                format!("{width:?}"),
                Gmac {
                    backend: Backend::Hw(k),
                },
            ));
        }
    }
    all
}

/// A small deterministic generator (xorshift64*), so that a failure
/// names a case that reruns the same.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn aes_fips197_vector() {
    let k = soft::Keys::new(&KEY);
    let pt = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee,
        0xff,
    ];
    assert_eq!(hex(&k.encrypt(pt)), "69c4e0d86a7b0430d8cdb78070b4c55a");
}

#[test]
fn every_implementation_matches_the_vectors() {
    let all = backends(&KEY);
    #[cfg(target_arch = "x86_64")]
    if hw::available() {
        assert!(all.len() >= 2, "the hardware paths are tested too");
    }
    for (name, g) in all {
        for (n, want) in VECTORS {
            assert_eq!(hex(&g.tag(&NONCE, &[&data(n)])), want, "{name}: {n} bytes");
        }
    }
}

/// Each hardware path against the portable one: random keys, nonces,
/// lengths 0..20000 and splits into up to five parts (a packet's header
/// and payload are two) or 40, so that rounds, tails, gathered and
/// carried partial blocks meet at every offset.
#[test]
fn every_implementation_agrees_on_random_input() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..60 {
        let key: [u8; 16] = std::array::from_fn(|_| rng.next() as u8);
        let nonce: [u8; 12] = std::array::from_fn(|_| rng.next() as u8);
        let len = match case % 3 {
            0 => rng.below(20_000),
            1 => rng.below(300),
            _ => 1024 * rng.below(20) + rng.below(48),
        };
        let d: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // Mostly a few parts; every fourth case many small ones, which
        // fill the gathering buffer of `for_blocks` several times.
        let splits = if case % 4 == 3 { 40 } else { 5 };
        let mut cuts: Vec<usize> = (0..rng.below(splits)).map(|_| rng.below(len + 1)).collect();
        cuts.sort_unstable();
        let mut parts = Vec::new();
        let mut from = 0;
        for c in cuts.into_iter().chain([len]) {
            parts.push(&d[from..c]);
            from = c;
        }
        let all = backends(&key);
        let want = all[0].1.tag(&nonce, &[&d]);
        for (name, g) in &all {
            assert_eq!(
                g.tag(&nonce, &parts),
                want,
                "case {case}: {name}, {len} bytes in parts {:?}",
                parts.iter().map(|p| p.len()).collect::<Vec<_>>()
            );
        }
    }
}

/// Throughput of the tag, each implementation in turn at each size (a
/// small packet, MTU 1500's and 9000's segments, 64 KiB), in one part
/// and as a sender gives it (a 28-byte header, then the payload), the
/// best of 30 rounds so that other work on the machine counts less (run
/// by hand:
/// `cargo test --release -p openvia-core gmac_speed -- --ignored --nocapture --test-threads=1`).
#[test]
#[ignore]
fn gmac_speed() {
    let all = backends(&KEY);
    for size in [64usize, 1500, 9000, 65536] {
        let d = data(size);
        for head in [0, 28] {
            let parts: [&[u8]; 2] = [&d[..head], &d[head..]];
            let mut best = vec![f64::MAX; all.len()];
            for _ in 0..30 {
                for ((name, g), best) in all.iter().zip(&mut best) {
                    let bytes = if name == "portable" {
                        100_000
                    } else {
                        20_000_000
                    };
                    let reps = (bytes / size).max(10);
                    let t = std::time::Instant::now();
                    let mut x = 0u8;
                    for _ in 0..reps {
                        x ^= g.tag(&NONCE, &parts)[0];
                    }
                    std::hint::black_box(x);
                    *best = best.min(t.elapsed().as_secs_f64() / reps as f64);
                }
            }
            let line: Vec<String> = all
                .iter()
                .zip(&best)
                .map(|((name, _), s)| {
                    format!("{name} {:.2} ({:.0} ns)", size as f64 / s / 1e9, s * 1e9)
                })
                .collect();
            let how = if head == 0 {
                "one part"
            } else {
                "header + payload"
            };
            println!("gmac GB/s at {size} B, {how}: {}", line.join(", "));
        }
    }
}

#[test]
fn parts_split_anywhere_give_the_same_tag() {
    let g = Gmac::new(&KEY);
    let d = data(1000);
    let want = g.tag(&NONCE, &[&d]);
    for (a, b) in [(0, 0), (1, 1), (15, 600), (16, 32), (17, 999), (500, 1000)] {
        assert_eq!(
            g.tag(&NONCE, &[&d[..a], &d[a..b], &d[b..]]),
            want,
            "{a} {b}"
        );
    }
    let mut other = NONCE;
    other[11] ^= 1;
    assert_ne!(g.tag(&other, &[&d]), want);
}
