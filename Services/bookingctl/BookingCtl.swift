import ArgumentParser

/// `bookingctl`: one CLI for people and scripts to operate the room-booking
/// set over the broker. Human output by default, `--json` for scripts.
@main
struct BookingCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bookingctl",
        abstract: "Operate the room-booking services over RabbitMQ.",
        discussion: """
            Every command talks to the broker named by --amqp-url (default: the
            AMQP_URL environment variable, else amqp://guest:guest@127.0.0.1:5672/%2f).
            Commands that send a booking command wait for its reply and exit
            non-zero with the contract's error code on an error reply.
            """,
        subcommands: [PassesCommand.self, ProjectorCommand.self])
}
