fn main() -> std::process::ExitCode {
    autoapp::cli::main()
}
