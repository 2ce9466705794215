// The launcher allocates a little on every call (a request's headers, a
// record's row, a guest's input and output) from several threads at once,
// and SQLite allocates and frees a statement journal for every write:
// mimalloc serves both (its `override` feature takes the C code's `malloc`
// too) without handing memory back and forth to the kernel, as the C
// library's allocator did. Its `no_thp` feature keeps it from asking for
// transparent huge pages: with them, 100 idle apps held 636 MiB instead of
// 94 (docs/performance-history.md, "One allocator for the whole process").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    autoapp::cli::main()
}
