//! The conv-state tensors and views of one GDN layer as llama.cpp builds them (spec §1.2, §1.3
//! C2–C5, W1/W2), shared by the GET_ROWS, CONCAT, CPY and CPY_SNAPSHOTS cases.

use crate::ops::{ConcatDim0, CpySnapshots, GetRows, Op};
use crate::suite::Builder;
use crate::suite::inputs::Values;
use crate::tensor::{DType, Tensor};

/// Sizes of one layer's conv chain.
#[derive(Clone, Copy, Debug)]
pub struct ConvLayer {
    pub d_conv: usize,
    /// Conv channels C.
    pub channels: usize,
    pub n_t: usize,
    pub n_s: usize,
    /// Cells per rollback group (M).
    pub cells: usize,
    /// Rollback groups 1 + R; the cache has `cells · groups` rows.
    pub groups: usize,
    /// First cell of the ubatch.
    pub kv_head: usize,
}

impl ConvLayer {
    /// Columns of a conv state (d_conv − 1).
    pub fn state_len(&self) -> usize {
        self.d_conv - 1
    }

    /// One cache row: (d_conv − 1)·C floats (`n_embd_r`).
    pub fn row_len(&self) -> usize {
        self.state_len() * self.channels
    }

    /// The conv state `r_l`: ne [(d_conv−1)·C, M·(1+R)], contiguous, any bits.
    pub fn cache(&self, b: &mut Builder) -> Tensor {
        b.tensor_padded(DType::F32, [self.row_len(), self.cells * self.groups, 1, 1], [0; 4], Values::AnyBits)
    }

    /// `qkv_T` (C4): the transpose of the projection output ne [C, n_t, n_s] (row-major
    /// \[s\]\[t\]\[c\]), i.e. ne [n_t, C, n_s], nb [4·C, 4, 4·C·n_t] — or with `pad` extra channels
    /// per projection row (nb [4·(C+pad), 4, …]).
    pub fn projection_t(&self, b: &mut Builder, pad: usize) -> Tensor {
        b.tensor_padded(DType::F32, [self.channels, self.n_t, self.n_s, 1], [pad, 0, 0, 0], Values::AnyBits).transpose()
    }

    /// The gathered conv states as CONCAT's first input (C3): ne [d_conv−1, C, n_s], any bits.
    pub fn conv_states(&self, b: &mut Builder) -> Tensor {
        b.tensor_padded(DType::F32, [self.state_len(), self.channels, self.n_s, 1], [0; 4], Values::AnyBits)
    }

    /// `conv_input` (C5): ne [d_conv−1+n_t, C, n_s], contiguous, poisoned.
    pub fn conv_input(&self, b: &mut Builder) -> Tensor {
        b.output([self.state_len() + self.n_t, self.channels, self.n_s, 1])
    }

    /// `window(o)`: ne [d_conv−1, C, n_s] of `conv_input`, columns o … o+d_conv−2.
    pub fn window(&self, conv_input: &Tensor, o: usize) -> Tensor {
        let nb = conv_input.layout.nb;
        conv_input.view([self.state_len(), self.channels, self.n_s, 1], [4, nb[1], nb[2], nb[3]], 4 * o)
    }

    /// `dst(slot)`: ne [(d_conv−1)·C, n_s] rows of the cache from row slot·M + kv_head.
    pub fn dst(&self, cache: &Tensor, slot: usize) -> Tensor {
        let row = cache.layout.nb[1];
        let first = slot * self.cells + self.kv_head;
        cache.view([self.row_len(), self.n_s, 1, 1], [4, row, row * self.n_s, row * self.n_s], first * row)
    }

    /// The whole conv-state chain in graph order: GET_ROWS of the rows `s_copy` (one per
    /// sequence) from the cache, CONCAT with the transposed projection, then all `groups`
    /// snapshot rows in one CPY_SNAPSHOTS into the same cache.
    pub fn chain(&self, b: &mut Builder, s_copy: &[i32]) -> Vec<Box<dyn Op>> {
        assert_eq!(s_copy.len(), self.n_s, "one source row per sequence");
        let cache = self.cache(b);
        let rows = b.mem.alloc_indices(s_copy);
        let gathered = b.output([self.row_len(), self.n_s, 1, 1]);
        let conv_states = gathered.reshape([self.state_len(), self.channels, self.n_s, 1]).expect("a contiguous output");
        let conv_input = self.conv_input(b);
        let b_view = self.projection_t(b, 0);
        vec![
            Box::new(GetRows { src: cache, rows, dst: gathered }),
            Box::new(ConcatDim0 { a: conv_states, b: b_view, dst: conv_input }),
            Box::new(CpySnapshots {
                conv_input,
                cache,
                d_conv: self.d_conv,
                first_row: self.kv_head,
                group_stride: self.cells,
                n_slots: self.groups,
            }),
        ]
    }
}
