//! gpupmd: the privileged daemon (see issue "gpupmd: the privileged daemon").

fn main() {
    eprintln!("gpupmd: not built yet; the device model and driver node come first");
    std::process::exit(2);
}
