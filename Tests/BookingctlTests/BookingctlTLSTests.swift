import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport

/// bookingctl over `amqps://` as an operator or an outside system on
/// another host runs it: the broker's private CA from `AMQP_CA_FILE` or
/// `--ca-file`, and a client certificate logging in with EXTERNAL.
@Suite("bookingctl over TLS", .serialized)
struct BookingctlTLSTests {
    /// The handler's vhost on the broker's TLS listener, as `user`.
    func tlsURL(_ handler: Handler, user: String? = nil) throws -> AMQPURL {
        var url = try TestBroker.tls().url
        url.vhost = handler.url.vhost
        url.user = user ?? handler.url.user
        url.password = user == nil ? handler.url.password : ""
        return url
    }

    @Test func bookingctlVerifiesTheBrokerAgainstAPrivateCA() async throws {
        let handler = try await Handler()
        defer { Task { await handler.stop() } }
        let ca = try TestBroker.tls().caFile
        let cli = CLIRunner(url: try tlsURL(handler))
        let list = ["bookings", "list", "--from", localDate(daysFromNow: 1), "--to", localDate(daysFromNow: 2)]

        // As a new user tries it: no CA given, so the system bundle; the
        // message says why and what to set.
        let refused = try await cli.run(list)
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("does not verify against the system CA bundle"), "\(refused.stderr)")
        #expect(refused.stderr.contains("the CA that signed it is not in the CA file"), "\(refused.stderr)")
        #expect(refused.stderr.contains("AMQP_CA_FILE"), "\(refused.stderr)")

        let fromEnvironment = try await cli.run(list, environment: ["AMQP_CA_FILE": ca])
        #expect(fromEnvironment.status == 0, "\(fromEnvironment.stderr)")
        let fromOption = try await cli.run(list + ["--ca-file", ca])
        #expect(fromOption.status == 0, "\(fromOption.stderr)")

        // A CA file that cannot be read is named with the reason.
        let missing = try await cli.run(list + ["--ca-file", "/nonexistent/ca.pem"])
        #expect(missing.status != 0)
        #expect(missing.stderr.contains("CA file /nonexistent/ca.pem: cannot read it: No such file or directory"), "\(missing.stderr)")
    }

    @Test func anOutsideSystemBooksWithItsClientCertificateAndExternal() async throws {
        let handler = try await Handler()
        defer { Task { await handler.stop() } }
        let ca = try TestBroker.tls().caFile
        let user = uniqueName("partner-system")
        try TestBroker.ctl(["add_user", user, "unused-\(UUID().uuidString)"])
        defer { _ = try? TestBroker.ctl(["delete_user", user]) }
        try TestBroker.ctl(["clear_password", user])
        try TestBroker.ctl(["set_permissions", "-p", handler.url.vhost, user, ".*", ".*", ".*"])
        let scratch = try TemporaryDirectory("ctl-tls")
        defer { scratch.remove() }
        let certificates = try TestCertificates(directory: scratch.path)
        let client = try certificates.issue("partner", commonName: user, by: try TestBroker.tlsAuthority())

        let cli = CLIRunner(url: try tlsURL(handler, user: user))
        let environment = ["AMQP_CA_FILE": ca, "AMQP_CERT_FILE": client.certificate, "AMQP_KEY_FILE": client.key,
                           "AMQP_AUTH_MECHANISM": "EXTERNAL"]
        let booked = try await cli.run(["book", "--room", "Berlin", "--date", localDate(daysFromNow: 3), "--start", "09:00",
                                        "--end", "10:00", "--title", "Partner sync", "--attendee", BookingctlTests.ada, "--json"],
                                       environment: environment)
        #expect(booked.status == 0, "\(booked.stderr)")
        let reply = try ContractJSON.decode(CommandReply.self, from: Data(booked.stdout.utf8))
        #expect(reply.bookingValue?.requestedBy == user, "user_id is the certificate's name")

        // An unusable key is a clear error naming the file.
        var badKey = environment
        badKey["AMQP_KEY_FILE"] = client.certificate
        let refused = try await cli.run(["bookings", "list", "--from", localDate(daysFromNow: 1), "--to", localDate(daysFromNow: 4)],
                                        environment: badKey)
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("client key file \(client.certificate): holds no PEM private key"), "\(refused.stderr)")
    }
}
