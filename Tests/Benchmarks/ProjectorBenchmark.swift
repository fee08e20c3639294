import ArgumentParser

struct ProjectorBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "projector",
        abstract: "Availability queries (HTTP and RPC) over a large read model, and event lag.")

    func run() async throws {
        throw ValidationError("not implemented yet")
    }
}
