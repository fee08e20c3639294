import AMQPClient
import Foundation
import Testing
import TestSupport

/// `amqps://` as the broker's outside clients use it: a private CA, client
/// certificates, EXTERNAL, and every refusal with its reason. Against the
/// shared broker's TLS listener (scripts/rabbitmq.sh: verify_peer without
/// requiring a certificate, EXTERNAL offered) and, for the broker's own
/// certificate changing, a private node.
@Suite("TLS to the broker", .serialized)
struct TLSTests {
    /// Certificates of one test, in a directory it removes.
    func scratch(_ name: String) throws -> (TestCertificates, TemporaryDirectory) {
        let directory = try TemporaryDirectory(name)
        return (try TestCertificates(directory: directory.path), directory)
    }

    func configuration(_ url: AMQPURL, _ name: String, ca: String? = nil) -> AMQPConfiguration {
        var configuration = AMQPConfiguration(url: url, connectionName: name)
        configuration.tlsCACertificatePath = ca
        configuration.connectTimeoutSeconds = 5
        return configuration
    }

    /// The error of connecting with `configuration`, which must fail.
    func refusal(_ configuration: AMQPConfiguration, _ name: String) async -> AMQPError? {
        await #expect(throws: AMQPError.self) {
            let connection = try await AMQPConnection.connect(configuration: configuration, logger: testLogger(name))
            await connection.close()
        }
    }

    /// Publishes to a fresh queue and reads it back: the connection really works.
    func roundTrip(_ connection: AMQPConnection, userID: String? = nil) async throws -> AMQPDelivery? {
        let queue = uniqueName("tls-trip")
        try await connection.declare([.queue(QueueDeclaration(queue, type: .classic, durable: false, autoDelete: false))])
        try await connection.publish(Array("over TLS".utf8), routingKey: queue, properties: AMQPProperties(userID: userID))
        let delivery = try await withTimeout(30, "reading back") { () async throws -> AMQPDelivery? in
            while true {
                if let delivery = try await connection.get(queue: queue) { return delivery }
                try await Task.sleep(for: .milliseconds(20))  // basic.get has nothing to wait on
            }
        }
        try? await delivery?.ack()
        _ = try? await connection.deleteQueue(queue)
        return delivery
    }

    @Test func aHostNameTheCertificateDoesNotCarryIsRefusedWithTheNamesItDoes() async throws {
        let (url, ca) = try TestBroker.tls()
        var other = url
        other.host = "vm"  // /etc/hosts: 127.0.0.1 too, but not in the certificate
        let error = await refusal(configuration(other, "tls-wrong-host", ca: ca), "tls-wrong-host")
        #expect(error?.code == .tlsFailed)
        #expect(error?.message.contains("does not name the host 'vm'") == true, "\(String(describing: error))")
        #expect(error?.message.contains("DNS:localhost, IP:127.0.0.1") == true, "\(String(describing: error))")

        // Turned off with a reason: the chain is still checked...
        var skipping = configuration(other, "tls-skip-hostname", ca: ca)
        skipping.tlsSkipHostnameCheckReason = "test: the broker is reached by another name"
        let connection = try await AMQPConnection.connect(configuration: skipping, logger: testLogger("tls-skip-hostname"))
        #expect(try await roundTrip(connection) != nil)
        await connection.close()
        // ... so without the CA it is still refused.
        skipping.tlsCACertificatePath = nil
        let unverified = await refusal(skipping, "tls-skip-hostname-no-ca")
        #expect(unverified?.code == .tlsFailed)
        #expect(unverified?.message.contains("does not verify against the system CA bundle") == true, "\(String(describing: unverified))")
    }

    @Test func aBrokerCertificateTheCADoesNotVouchForIsRefusedWithTheReason() async throws {
        let (url, _) = try TestBroker.tls()
        let (certificates, directory) = try scratch("tls-other-ca")
        defer { directory.remove() }
        let stranger = try certificates.authority("stranger-ca")
        let error = await refusal(configuration(url, "tls-other-ca", ca: stranger.certificate), "tls-other-ca")
        #expect(error?.code == .tlsFailed)
        #expect(error?.message.contains("does not verify against the CA file \(stranger.certificate)") == true, "\(String(describing: error))")
        // The broker sends its CA with its certificate: OpenSSL finds a root it does not trust.
        #expect(error?.message.contains("self-signed certificate in certificate chain for CN = room-booking test CA, depth 1; the CA that signed it is not in the CA file") == true,
                "\(String(describing: error))")

        // The system bundle: the message points at AMQP_CA_FILE.
        let system = await refusal(configuration(url, "tls-system-ca"), "tls-system-ca")
        #expect(system?.code == .tlsFailed)
        #expect(system?.message.contains("AMQP_CA_FILE") == true, "\(String(describing: system))")

        // A plain AMQP port behind an amqps:// URL is named as such.
        var plainPort = url
        plainPort.port = try TestBroker.url().port
        let mismatch = await refusal(configuration(plainPort, "tls-plain-port", ca: try TestBroker.tls().caFile), "tls-plain-port")
        #expect(mismatch?.code == .tlsFailed)
        #expect(mismatch?.message.contains("plain AMQP port") == true, "\(String(describing: mismatch))")
    }

    @Test func unusableFilesAreNamedWithTheReasonBeforeAnyConnect() async throws {
        let (url, ca) = try TestBroker.tls()
        let (certificates, directory) = try scratch("tls-certs")
        defer { directory.remove() }
        let authority = try TestBroker.tlsAuthority()
        let client = try certificates.issue("files-client", commonName: "files-client", by: authority)
        let otherClient = try certificates.issue("files-other", commonName: "files-other", by: authority)
        let expired = try certificates.issue("files-expired", commonName: "files-expired", by: authority, expired: true)
        let garbage = certificates.directory + "/garbage.pem"
        try "not a key\n".write(toFile: garbage, atomically: true, encoding: .utf8)
        let missing = certificates.directory + "/no-such-key.pem"

        func attempt(certificate: String? = nil, key: String? = nil, ca caFile: String? = ca) async -> AMQPError? {
            var c = configuration(url, "tls-files", ca: caFile)
            c.tlsClientCertificatePath = certificate
            c.tlsClientKeyPath = key
            return await refusal(c, "tls-files")
        }
        let cases: [(AMQPError?, String)] = [
            (await attempt(certificate: client.certificate, key: missing), "client key file \(missing): cannot read it: No such file or directory"),
            (await attempt(certificate: client.certificate, key: garbage), "client key file \(garbage): holds no PEM private key"),
            (await attempt(certificate: client.certificate, key: otherClient.key), "client key file \(otherClient.key): is not the key of the certificate \(client.certificate)"),
            (await attempt(certificate: expired.certificate, key: expired.key), "client certificate file \(expired.certificate): the certificate has expired (not after Jan  2 00:00:00 2020 GMT)"),
            (await attempt(certificate: garbage, key: client.key), "client certificate file \(garbage): holds no PEM certificate"),
            (await attempt(ca: missing), "CA file \(missing): cannot read it: No such file or directory"),
            (await attempt(ca: garbage), "CA file \(garbage): holds no PEM certificate"),
        ]
        for (error, expected) in cases {
            #expect(error?.code == .tlsFailed, "\(expected)")
            #expect(error?.message.contains(expected) == true, "expected '\(expected)', got \(String(describing: error))")
        }

        // Settings that cannot work are refused as they are read.
        var settings = AMQPConfiguration()
        #expect(throws: AMQPError.self) { try settings.applyTLSEnvironment(["AMQP_CERT_FILE": client.certificate]) }
        settings = AMQPConfiguration()
        #expect(throws: AMQPError.self) { try settings.applyTLSEnvironment(["AMQP_AUTH_MECHANISM": "EXTERNAL"]) }
        settings = AMQPConfiguration()
        #expect(throws: AMQPError.self) { try settings.applyTLSEnvironment(["AMQP_TLS_SKIP_HOSTNAME_CHECK": "true"]) }
        settings = AMQPConfiguration()
        try settings.applyTLSEnvironment(["AMQP_CERT_FILE": client.certificate, "AMQP_KEY_FILE": client.key,
                                          "AMQP_AUTH_MECHANISM": "external", "AMQP_CA_FILE": ca])
        #expect(settings.authMechanism == .external && settings.tlsClientKeyPath == client.key)

        // A client certificate never goes over plain AMQP.
        var plain = configuration(try TestBroker.url(), "tls-plain-with-cert")
        plain.tlsClientCertificatePath = client.certificate
        plain.tlsClientKeyPath = client.key
        let fallback = await refusal(plain, "tls-plain-with-cert")
        #expect(fallback?.code == .tlsFailed)
        #expect(fallback?.message.contains("use amqps://") == true, "\(String(describing: fallback))")
    }

    @Test func aClientCertificateLogsInWithExternalAsItsCommonName() async throws {
        let (tlsURL, ca) = try TestBroker.tls()
        let vhostURL = try TestBroker.isolatedURL("tls-ext")
        defer { TestBroker.deleteVhost(vhostURL.vhost) }
        let (certificates, directory) = try scratch("tls-certs")
        defer { directory.remove() }
        let user = uniqueName("outside-system")
        // A user with no password: it can only log in with its certificate.
        try TestBroker.ctl(["add_user", user, "unused-\(UUID().uuidString)"])
        defer { _ = try? TestBroker.ctl(["delete_user", user]) }
        try TestBroker.ctl(["clear_password", user])
        try TestBroker.ctl(["set_permissions", "-p", vhostURL.vhost, user, ".*", ".*", ".*"])
        let client = try certificates.issue("external-client", commonName: user, by: try TestBroker.tlsAuthority())

        var url = tlsURL
        url.vhost = vhostURL.vhost
        url.user = user
        url.password = ""
        var external = configuration(url, "tls-external", ca: ca)
        external.tlsClientCertificatePath = client.certificate
        external.tlsClientKeyPath = client.key
        external.authMechanism = .external
        let connection = try await AMQPConnection.connect(configuration: external, logger: testLogger("tls-external"))
        // The broker checks user_id against the user it logged in: the certificate's name.
        let delivery = try await roundTrip(connection, userID: user)
        #expect(delivery?.properties.userID == user)
        await connection.close()

        // PLAIN cannot log this user in: it has no password.
        var plain = external
        plain.authMechanism = .plain
        let refused = await refusal(plain, "tls-external-plain")
        #expect(refused?.code == .accessRefused)

        // A certificate from a CA the broker does not trust is refused by the broker, and said so.
        let strangerCA = try certificates.authority("external-stranger-ca")
        let stranger = try certificates.issue("external-stranger", commonName: user, by: strangerCA)
        var untrusted = external
        untrusted.tlsClientCertificatePath = stranger.certificate
        untrusted.tlsClientKeyPath = stranger.key
        let error = await refusal(untrusted, "tls-external-stranger")
        #expect(error?.code == .tlsFailed)
        #expect(error?.message.contains("refused the client certificate \(stranger.certificate)") == true, "\(String(describing: error))")
        #expect(error?.message.contains("unknown ca") == true, "\(String(describing: error))")

        // EXTERNAL without TLS is refused before anything is sent.
        var overPlain = external
        overPlain.url = vhostURL
        let plainError = await refusal(overPlain, "tls-external-over-plain")
        #expect(plainError?.code == .tlsFailed)
    }

    /// What a running service does when the broker presents a new
    /// certificate: it finds out at its next connect. One from the same CA
    /// is taken without a restart; one that does not verify keeps it
    /// reconnecting (never falling back to plain AMQP) until the broker
    /// presents a good one again. A new connection is told the reason.
    @Test func aRunningConnectionMeetsTheBrokersNewCertificateAtItsNextConnect() async throws {
        let scratch = try TemporaryDirectory("tls-rotation")
        defer { scratch.remove() }
        let certificates = try TestCertificates(directory: scratch.path)
        let authority = try certificates.authority("rotation-ca")
        let names = ["DNS:localhost", "IP:127.0.0.1"]
        let first = try certificates.issue("first", commonName: "localhost", subjectAltNames: names, by: authority)
        let second = try certificates.issue("second", commonName: "localhost", subjectAltNames: names, by: authority)
        let expired = try certificates.issue("expired", commonName: "localhost", subjectAltNames: names, by: authority, expired: true)
        let foreign = try certificates.issue("foreign", commonName: "localhost", subjectAltNames: names,
                                             by: try certificates.authority("foreign-ca"))
        let node = try RabbitMQNode.start(tls: (authority, first))
        defer { node.stop() }
        let url = try node.tls.url

        var settings = configuration(url, "tls-rotation", ca: authority.certificate)
        settings.reconnect = Backoff(initial: 0.05, maximum: 0.5)
        let running = try await AMQPConnection.connect(configuration: settings, logger: testLogger("tls-rotation"))
        #expect(try await roundTrip(running) != nil)

        func reconnected(times: Int) async throws {
            try await withTimeout(60, "reconnect \(times)") {
                while !(running.isConnected && running.reconnectCount >= times) { try await Task.sleep(for: .milliseconds(50)) }
            }
        }

        // Same CA: taken at the next connect.
        try node.presentServerCertificate(second)
        try node.closeAllConnections()
        try await reconnected(times: 1)
        #expect(try await roundTrip(running) != nil)

        // Expired, then another CA: refused with the reason; the running
        // connection stays down and keeps trying.
        for (certificate, reason) in [(expired, "certificate has expired (not after Jan  2 00:00:00 2020 GMT)"),
                                      (foreign, "unable to get local issuer certificate for CN = localhost, depth 0; the CA that signed it is not in the CA file")] {
            try node.presentServerCertificate(certificate)
            let error = await refusal(settings, "tls-rotation-new")
            #expect(error?.code == .tlsFailed)
            #expect(error?.message.contains(reason) == true, "\(String(describing: error))")
            #expect(error?.message.contains("CA file \(authority.certificate)") == true, "\(String(describing: error))")
        }
        try node.closeAllConnections()
        try await withTimeout(30, "noticing the close") {
            while running.isConnected { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(running.reconnectCount == 1)

        // A good certificate again: the running connection is back by itself.
        try node.presentServerCertificate(first)
        try await reconnected(times: 2)
        #expect(try await roundTrip(running) != nil)
        await running.close()
    }
}
