//! `ringcast-engine`: the offload engine daemon (DPU-emulation mode). Configuration comes from
//! `RINGCAST_*` environment variables (see `ringcast info`); `--name NAME` overrides
//! `RINGCAST_ENGINE`. Host processes attach with `ringcast_host::Host::attach(NAME)`.
use ringcast_offload::{runner, Config};

fn main() {
    let mut config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ringcast-engine: {e}");
            std::process::exit(2);
        }
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--name", Some(n)) => config.runner.engine_name = n,
            _ => {
                eprintln!("usage: ringcast-engine [--name NAME]   (tunables: RINGCAST_* variables, see `ringcast info`)");
                std::process::exit(2);
            }
        }
    }
    if let Err(e) = config.validate() {
        eprintln!("ringcast-engine: {e}");
        std::process::exit(2);
    }
    if let Err(e) = runner::run_daemon(config) {
        eprintln!("ringcast-engine: {e}");
        std::process::exit(1);
    }
}
