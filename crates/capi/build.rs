//! Compiles the variadic `grpc_call`/`grpc_call_async` (stable Rust cannot define C variadic
//! functions) and makes the shared library export them with the Rust-defined functions.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=src/varargs.c");
    println!("cargo:rerun-if-changed=include/grpc.h");
    println!("cargo:rerun-if-changed=exports.map");
    cc::Build::new()
        .cargo_metadata(false)
        .file("src/varargs.c")
        .include("include")
        .flag_if_supported("-std=c99")
        .warnings(true)
        .extra_warnings(true)
        .compile("gridwise_varargs");
    // Whole archive: nothing in Rust calls the variadic functions, and they must be in the
    // libraries all the same.
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rustc-link-search=native={out}");
    println!("cargo:rustc-link-lib=static:+whole-archive=gridwise_varargs");
    // rustc's own version script exports only symbols defined in Rust; this one adds the
    // GridRPC names, the C-defined variadic calls among them.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/exports.map");
}
