//! `shoal-controller`: the operator binary.

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("crd") => {
            print!("{}", shoal_controller::crd::crd_yaml());
            Ok(())
        }
        _ => anyhow::bail!("usage: shoal-controller crd"),
    }
}
