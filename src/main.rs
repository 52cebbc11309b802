//! The `postback` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use postback::config::Config;

#[derive(Parser)]
#[command(
    name = "postback",
    version,
    about = "Webhook notification dispatcher with tiered retries"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API, the scheduler and the sender pool.
    Serve {
        /// TOML configuration file; `POSTBACK_<SECTION>_<KEY>` variables override it.
        #[arg(long, env = "POSTBACK_CONFIG")]
        config: Option<PathBuf>,
        /// Serve the API without bearer tokens (development only).
        #[arg(long)]
        insecure_no_auth: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            config,
            insecure_no_auth,
        } => serve(config, insecure_no_auth),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("postback: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(path: Option<PathBuf>, insecure_no_auth: bool) -> anyhow::Result<()> {
    let config = Config::load(path.as_deref(), insecure_no_auth)?;
    postback::telemetry::init(&config.settings.log)?;
    postback::sender::install_crypto_provider();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(postback::app::serve(config))
}
