//! The `postback` binary; the command line lives in `postback::cli`.

fn main() -> std::process::ExitCode {
    postback::cli::main()
}
