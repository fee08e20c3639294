import ArgumentParser

struct PassBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "passes",
        abstract: "Passes/s through the spool and a local HTTP gateway beside the raw broker rate.")

    func run() async throws {
        throw ValidationError("not implemented yet")
    }
}
