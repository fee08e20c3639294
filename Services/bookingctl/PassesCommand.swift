import ArgumentParser

/// `bookingctl passes …`: what operators do with passes that could not be
/// delivered (the `passes.failed` queue).
struct PassesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "passes",
        abstract: "Inspect and act on passes that could not be delivered.",
        subcommands: [])
}
