//! The `postback` binary; the command line lives in `postback::cli`.

/// mimalloc rather than the system allocator: profiles of a busy instance showed glibc's
/// malloc and free taking a fifth of its CPU. Built without asking for transparent huge
/// pages (`no_thp`): with them, each thread's heap took whole 2 MiB pages, and a burst's
/// peak RSS was nearly twice as large for the same CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    postback::cli::main()
}
