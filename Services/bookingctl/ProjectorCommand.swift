import ArgumentParser

/// `bookingctl projector …`: maintenance of the availability projector.
struct ProjectorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "projector",
        abstract: "Maintain the availability projector's read model.",
        subcommands: [])
}
