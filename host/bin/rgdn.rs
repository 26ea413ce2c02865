fn main() {
    println!("rgdn {}", env!("CARGO_PKG_VERSION"));
}
