//! What a `Linear`'s products are launched on: its operands, the three products by
//! their operand layouts, and the work fused into them.

use crate::gpu::{PooledBuffer, Slice};
use crate::reference::{DropoutMask, MatmulShape};

/// A `Linear` layer's operands. The backward reads `bias` only to know that there
/// is one (its gradient is then made too).
#[derive(Clone, Copy, Debug)]
pub struct Linear<'a> {
    pub inp: &'a PooledBuffer,
    pub weight: Slice<'a>,
    pub bias: Option<Slice<'a>>,
    /// `weight` rounded to f16, in its order (`crate::kernels::F16Weights::of`): the
    /// f16 cores that can read it in its place do, in the forward and dinp (the
    /// same halves as they would round `weight` to, half the bytes).
    pub weight_f16: Option<Slice<'a>>,
}

/// The three products of a `Linear` layer, by their operand layouts (one prelude
/// each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `out = inp · weightᵀ` (`A·Bᵀ`, `matmul_nt.wgsl`).
    Forward,
    /// `dinp = dout · weight` (`A·B`, `matmul_nn.wgsl`).
    Dinp,
    /// `dweight = doutᵀ · inp` (`Aᵀ·B`, `matmul_tn.wgsl`).
    Dweight,
}

impl Layout {
    pub const ALL: [Layout; 3] = [Layout::Forward, Layout::Dinp, Layout::Dweight];

    pub fn name(self) -> &'static str {
        match self {
            Layout::Forward => "forward",
            Layout::Dinp => "dinp",
            Layout::Dweight => "dweight",
        }
    }

    /// The GEMM's `(m, n, k)` for a `Linear` of `shape`.
    pub fn gemm(self, shape: MatmulShape) -> (usize, usize, usize) {
        let MatmulShape { rows, k, n } = shape;
        match self {
            Layout::Forward => (rows, n, k),
            Layout::Dinp => (rows, k, n),
            Layout::Dweight => (n, k, rows),
        }
    }
}

/// Elementwise work fused into the products' loads and stores (none by default).
#[derive(Clone, Copy, Debug, Default)]
pub struct Fusion<'a> {
    /// The layer reads GELU of its input: the forward and dweight apply GELU to
    /// `inp` as they load it (the MLP's c_proj reads c_fc's pre-GELU output, so
    /// GELU's output is never written), and dinp is the gradient of GELU's input
    /// (times gelu'(inp) in its epilogue).
    pub gelu_inp: bool,
    /// Forward: inverted dropout on the product plus bias, element `r * n + j` of
    /// the mask (the same as `reference::dropout` of that output).
    pub dropout: Option<DropoutMask>,
    /// Forward: added last (`[rows, n]`): a residual branch's end, so neither the
    /// branch's output nor its dropped copy is written.
    pub residual: Option<&'a PooledBuffer>,
}
