// GELU, tanh approximation (PyTorch's approximate="tanh"), as functions that the
// matmul preludes apply on the fly (joined in front of them; no kernel of its own):
//   gelu(x)       = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu_grad(x)  = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) du/dx
// Computed through the identity 0.5 (1 + tanh(u)) = s = 1 / (1 + e^-2u), with
// 1 - tanh(u)^2 = 4 s (1 - s) and 1 - s = e^-2u s: 1 + tanh(u) cancels to a few
// correct bits for negative x, the sigmoid form does not.
// Past |x| = 10 (|u| > 43) the results are x or 0 and slopes 1 or 0 in f32 (to under
// 1e-30), taken directly: e^-2u would overflow (as tanh of large arguments, NaN on
// some drivers), and so would x^3 and du near |x| = 1e13 and 1e19.

const GELU_SCALE: f32 = 0.7978845608028654; // sqrt(2 / pi)
const GELU_CUBIC: f32 = 0.044715;
const GELU_TAIL: f32 = 10.0;

// (s, e^-2u) at x, for |x| <= GELU_TAIL (|2u| < 88, so e^-2u is finite).
fn gelu_sigmoid_2u(v: f32) -> vec2<f32> {
    let u = GELU_SCALE * (v + GELU_CUBIC * v * v * v);
    let e = exp(-2.0 * u);
    return vec2<f32>(1.0 / (1.0 + e), e);
}

fn gelu(v: f32) -> f32 {
    let inner = clamp(v, -GELU_TAIL, GELU_TAIL);
    let tail = select(0.0, v, v > 0.0);
    return select(v * gelu_sigmoid_2u(inner).x, tail, abs(v) > GELU_TAIL);
}

fn gelu4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
}

fn gelu_grad(v: f32) -> f32 {
    let inner = clamp(v, -GELU_TAIL, GELU_TAIL);
    let se = gelu_sigmoid_2u(inner);
    let s = se.x;
    let du = GELU_SCALE * (1.0 + 3.0 * GELU_CUBIC * inner * inner);
    let local = s + 2.0 * inner * s * (se.y * s) * du;
    return select(local, select(0.0, 1.0, v > 0.0), abs(v) > GELU_TAIL);
}

fn gelu_grad4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(gelu_grad(v.x), gelu_grad(v.y), gelu_grad(v.z), gelu_grad(v.w));
}
