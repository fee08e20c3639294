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
            Commands that send a booking command wait for its reply, print it and
            exit non-zero on an error reply (the contract's error code is printed).

            Exit status: 0 success; 1 error reply (or other failure); 3 no failed pass
            or message matched (passes failed / failed show/retry/discard); 64 bad usage; 68 nothing
            receives the message (service or topology missing); 69 broker
            unreachable, login refused, connection lost during the run (it is
            not re-established) or no reply in time (a command's id is printed:
            repeat it with --message-id to be sure it runs once); 77 the broker
            refused the message (the user may not write there).
            """,
        subcommands: [RoomCommand.self, BookCommand.self, ConfirmCommand.self, RejectCommand.self, CheckinCommand.self, CancelCommand.self,
                      UpdateCommand.self,
                      RescheduleCommand.self, BookingsCommand.self, RoomsCommand.self, SuggestCommand.self, PassesCommand.self, FailedCommand.self, ProjectorCommand.self,
                      TopologyCommand.self])
}
