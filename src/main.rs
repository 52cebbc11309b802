//! The `postback` binary; the command line lives in `postback::cli`.

/// mimalloc rather than the system allocator: profiles of a busy instance showed glibc's
/// malloc and free taking a fifth of its CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    postback::cli::main()
}
