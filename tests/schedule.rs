//! [seq-batch] The batched layer step's schedule as the kernel walks it (`abi::ScheduleWalk`: the
//! divisors prepared once per block) against the definition the host's readiness proof runs
//! (`abi::LayerStepSchedule`): the same items, in the same order, for every block of many grids
//! and shapes — including partial last chunks, one chunk, single-sequence chunks, odd head and
//! tile counts and the host's default splits. A walk that decodes one item differently would run
//! the wrong sequence's or head's work (or wait on the wrong chunk) on the GPU; here it fails on
//! the CPU.

use rgdn::kernels::abi::{BatchCursor, Divisor, LayerStepSchedule, ScheduleWalk};

#[test]
fn divisor_is_exact() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let edges = [0u32, 1, 2, 3, 7, 8, 31, 32, 63, 64, 65535, 65536, 1 << 31, (1 << 31) + 1, u32::MAX - 1, u32::MAX];
    let mut divisors: Vec<u32> = (1..=4096).collect();
    divisors.extend(edges.iter().copied().filter(|&d| d > 0));
    divisors.extend((0..2000).map(|_| (next() as u32).max(1)));
    for &d in &divisors {
        let div = Divisor::new(d);
        let mut ns: Vec<u32> = edges.to_vec();
        ns.extend((0..64).map(|_| next() as u32));
        ns.extend((0..64).map(|_| (next() % 200_000) as u32));
        ns.extend([d.wrapping_sub(1), d, d.wrapping_add(1), d.wrapping_mul(2).wrapping_sub(1), d.wrapping_mul(3)]);
        for n in ns {
            assert_eq!(div.div_rem(n), (n / d, n % d), "n = {n}, d = {d}");
        }
    }
    assert_eq!(Divisor::new(0).div_rem(12345), (0, 0), "d = 0 gives (0, 0), as div_or_zero");
}

/// Every item block b of a grid of `grid` blocks runs, through `advance` and `item` of either walk.
fn walk_items(
    advance: &dyn Fn(BatchCursor, u32) -> Option<BatchCursor>,
    item: &dyn Fn(BatchCursor) -> (rgdn::kernels::abi::BatchItem, u32),
    block: u32,
    grid: u32,
) -> Vec<(BatchCursor, rgdn::kernels::abi::BatchItem, u32)> {
    let mut out = Vec::new();
    let mut at = advance(BatchCursor { segment: 0, offset: 0 }, block);
    while let Some(c) = at {
        let (it, chunk) = item(c);
        out.push((c, it, chunk));
        at = advance(c, grid);
    }
    out
}

fn check_same(s: LayerStepSchedule) {
    let walk = ScheduleWalk::of(s);
    assert_eq!(walk.n_chunks(), s.n_chunks(), "{s:?}");
    for seg in 0..s.n_segments() {
        assert_eq!(walk.segment_len(seg), s.segment_len(seg), "segment {seg} of {s:?}");
    }
    for c in 0..s.n_chunks() {
        assert_eq!(walk.first_items(c), s.first_items(c), "chunk {c} of {s:?}");
    }
    let total = s.total_items();
    // Every item once, through the cursor at each offset of each segment.
    for seg in 0..s.n_segments() {
        for offset in 0..s.segment_len(seg) {
            let c = BatchCursor { segment: seg, offset };
            assert_eq!(walk.item(c), s.item(c), "{c:?} of {s:?}");
        }
    }
    for grid in [1u32, 2, 3, 7, 132, 264, 396, 528, total.max(1), total + 5] {
        for block in [0, 1, grid / 2, grid.saturating_sub(1)] {
            if block >= grid {
                continue;
            }
            let fast = walk_items(&|c, by| walk.advance(c, by), &|c| walk.item(c), block, grid);
            let plain = walk_items(&|c, by| s.advance(c, by), &|c| s.item(c), block, grid);
            assert_eq!(fast, plain, "block {block} of {grid}, {s:?}");
        }
    }
}

#[test]
fn the_kernels_walk_is_the_schedule() {
    let mut shapes = 0;
    for n_seqs in [1u32, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 64, 100, 256] {
        for n_tokens in [1u32, 2, 3, 4, 8, 16] {
            for (n_heads, n_chain_tiles) in [(32u32, 64u32), (16, 32), (48, 96), (1, 1), (3, 5), (5, 3)] {
                // The host's default split (`GdnLayerStep::batch_split`) is among these.
                let mut splits = Vec::new();
                for chunk in [1u32, 2, 3, n_seqs.div_ceil(4).max(2), n_seqs.div_ceil(2).max(2), n_seqs] {
                    for tile in [1u32, 3, 4, 8] {
                        for groups in [1u32, 2] {
                            splits.push((chunk.min(n_seqs), tile.min(chunk.min(n_seqs)), groups));
                        }
                    }
                }
                for (chunk_seqs, tile_seqs, groups_per_warp) in splits {
                    // One-row mat-vec items change only the mat-vec items' decoding: walked with
                    // one of the two group counts (the test's time).
                    for one_row_items in [false, true] {
                        if one_row_items && groups_per_warp == 1 {
                            continue;
                        }
                        let s = LayerStepSchedule {
                            n_seqs,
                            n_tokens,
                            n_heads,
                            n_chain_tiles,
                            chunk_seqs,
                            tile_seqs,
                            groups_per_warp,
                            one_row_items,
                        };
                        if s.n_chunks() as usize > rgdn::kernels::abi::BATCH_MAX_CHUNKS {
                            continue;
                        }
                        check_same(s);
                        shapes += 1;
                    }
                }
            }
        }
    }
    assert!(shapes > 5000, "{shapes} shapes walked");
}
