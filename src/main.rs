//! `tidepool`, the native command line (src/cli/). On wasm32 there is none: the
//! page drives the crate through src/web.rs.

#[cfg(not(target_arch = "wasm32"))]
mod cli;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
