//! Example client programs live beside this file: `cargo run -p gridwise-examples --example hello`.
