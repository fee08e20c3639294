import Foundation
import NIOSSL
import PostgresNIO
import ServiceSettings

/// Where the PostgreSQL store connects: `DATABASE_URL` as
/// `postgres://user:password@host:port/database?sslmode=…&schema=…`.
///
/// - `sslmode`: `disable` (default on loopback hosts), `prefer`, `require`
///   (default elsewhere; encrypts, does not verify), `verify-full`
///   (verifies the certificate and host name against the system's CAs, or
///   `sslrootcert=PATH`).
/// - `schema`: the schema the handler's tables live in (created when
///   missing; default `public`). Lets several deployments, or tests, share
///   one database.
public struct PostgresSettings: Sendable, Equatable, CustomStringConvertible {
    public enum TLSMode: String, Sendable {
        case disable, prefer, require
        case verifyFull = "verify-full"
    }

    public var host: String
    public var port: Int
    public var user: String
    public var password: String?
    public var database: String
    public var schema: String?
    public var tls: TLSMode
    public var rootCertificatePath: String?
    /// How quickly a connection gives up on an unreachable or silent server
    /// (`DATABASE_CONNECT_TIMEOUT`, `DATABASE_STATEMENT_TIMEOUT`,
    /// `DATABASE_KEEPALIVE`); ``PostgresTimeouts/standard`` unless read
    /// with ``init(url:environment:)``.
    public var timeouts: PostgresTimeouts = .standard

    /// Whether `text` names PostgreSQL (`postgres://` or `postgresql://`).
    public static func isPostgresURL(_ text: String) -> Bool {
        let lower = text.lowercased()
        return lower.hasPrefix("postgres://") || lower.hasPrefix("postgresql://")
    }

    /// Parses a `DATABASE_URL`; the error names what is wrong without echoing the password.
    public init(url text: String) throws {
        func bad(_ why: String) -> SettingsError {
            SettingsError("DATABASE_URL: \(why); expected postgres://user:password@host:port/database[?sslmode=require&schema=name]")
        }
        guard Self.isPostgresURL(text), let components = URLComponents(string: text) else { throw bad("not a postgres:// URL") }
        guard let host = components.host, !host.isEmpty else { throw bad("no host") }
        self.host = host
        port = components.port ?? 5432
        guard (1...65535).contains(port) else { throw bad("port out of range") }
        guard let user = components.user, !user.isEmpty else { throw bad("no user name") }
        // URLComponents' `user`, `password` and `path` are decoded already.
        self.user = user
        password = components.password
        database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        guard !database.isEmpty, !database.contains("/") else { throw bad("no database name") }
        let items = components.queryItems ?? []
        var tls: TLSMode = ["127.0.0.1", "localhost", "::1"].contains(host) ? .disable : .require
        schema = nil
        for item in items {
            switch item.name {
            case "sslmode":
                guard let value = item.value, let mode = TLSMode(rawValue: value) else {
                    throw bad("sslmode must be disable, prefer, require or verify-full")
                }
                tls = mode
            case "schema":
                guard let value = item.value, !value.isEmpty, value.count <= 63,
                      value.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }),
                      !(value.first?.isNumber ?? true) else {
                    throw bad("schema must be a plain identifier (letters, digits, _)")
                }
                schema = value.lowercased()
            case "sslrootcert":
                rootCertificatePath = item.value
            default:
                throw bad("unknown parameter '\(item.name)'")
            }
        }
        self.tls = tls
    }

    /// Parses `DATABASE_URL` (``init(url:)``) and reads the timeouts from
    /// `environment` (``PostgresTimeouts/init(environment:)``).
    public init(url text: String, environment: [String: String]) throws {
        try self.init(url: text)
        timeouts = try PostgresTimeouts(environment: environment)
    }

    /// The redacted URL, for logs.
    public var description: String {
        "postgres://\(user):***@\(host):\(port)/\(database)?sslmode=\(tls.rawValue)" + (schema.map { "&schema=\($0)" } ?? "")
    }

    /// The connection configuration postgres-nio takes.
    public func connectionConfiguration() throws -> PostgresConnection.Configuration {
        let nioTLS: PostgresConnection.Configuration.TLS
        switch tls {
        case .disable:
            nioTLS = .disable
        case .prefer, .require:
            var configuration = TLSConfiguration.makeClientConfiguration()
            if let rootCertificatePath {
                // As libpq: a root certificate with `require` verifies the
                // chain (verify-ca), not the host name.
                configuration.trustRoots = .file(rootCertificatePath)
                configuration.certificateVerification = .noHostnameVerification
            } else {
                configuration.certificateVerification = .none
            }
            let context = try NIOSSLContext(configuration: configuration)
            nioTLS = tls == .prefer ? .prefer(context) : .require(context)
        case .verifyFull:
            var configuration = TLSConfiguration.makeClientConfiguration()
            if let rootCertificatePath { configuration.trustRoots = .file(rootCertificatePath) }
            nioTLS = .require(try NIOSSLContext(configuration: configuration))
        }
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: user, password: password, database: database, tls: nioTLS)
        configuration.options.connectTimeout = .seconds(Int64(timeouts.connect))
        // Startup parameters hold for every statement of the connection and
        // every reconnect:
        // - a write transaction holds the lock every instance's writes wait
        //   for; if its client vanishes (host lost, partitioned, frozen)
        //   the server ends the session after 15 s idle in the transaction,
        //   and its keepalives notice a dead peer as ours do (the client
        //   side reads the same three values, ``PostgresConnection/connect(failingFast:logger:)``),
        //   instead of the operating system's two hours;
        // - `statement_timeout` ends a statement on the server at the bound
        //   the client waits for it (plus a grace for the answer to arrive),
        //   so the server lets go of its locks when the client gives up;
        // - `lock_timeout`: a lock not granted within 20 s fails its
        //   statement (55P03) instead of holding the connection for as long
        //   as the holder keeps it; a startup parameter rather than a
        //   `SET LOCAL` per write transaction, a round trip each;
        // - the schema's tables first, `public` for the extension it holds.
        var parameters = [("idle_in_transaction_session_timeout", "15000"),
                          ("lock_timeout", "20000"),
                          ("statement_timeout", "\(timeouts.statement * 1000)"),
                          ("tcp_keepalives_idle", "\(timeouts.keepalive)"),
                          ("tcp_keepalives_interval", "\(timeouts.keepaliveInterval)"),
                          ("tcp_keepalives_count", "\(PostgresTimeouts.keepaliveProbes)")]
        if let schema { parameters.append(("search_path", "\(schema), public")) }
        configuration.options.additionalStartupParameters = parameters
        return configuration
    }
}

/// How long a PostgreSQL connection waits before it gives up, so that work
/// on a connection cut off by the network ends within a known bound and
/// the caller's message goes back to the broker for another instance
/// (docs/configuration.md, "PostgreSQL").
///
/// - `DATABASE_CONNECT_TIMEOUT` (seconds, 1–300, default 10): TCP connect,
///   TLS and the PostgreSQL handshake together.
/// - `DATABASE_STATEMENT_TIMEOUT` (seconds, 1–3600, default 30): the
///   server's `statement_timeout`; the client gives up on a statement
///   without an answer 2 s after it (``PostgresConnection/result(_:_:)``),
///   closing the connection.
/// - `DATABASE_KEEPALIVE` (seconds, 1–3600, default 10): idle time before
///   TCP keepalive probes, on both ends; probes every half of it (at least
///   1 s), three unanswered ones end the connection. The client's socket
///   also gets `TCP_USER_TIMEOUT` of the same total, so data the peer
///   never acknowledges ends it too.
public struct PostgresTimeouts: Sendable, Equatable {
    public var connect: Int
    public var statement: Int
    public var keepalive: Int

    /// Unanswered keepalive probes before a connection is dead.
    public static let keepaliveProbes = 3
    /// How much longer than `statement` the client waits for an answer:
    /// the server's own timeout error should arrive first on a live link.
    public static let statementGrace = 2

    public static let standard = PostgresTimeouts(connect: 10, statement: 30, keepalive: 10)

    public init(connect: Int, statement: Int, keepalive: Int) {
        self.connect = connect
        self.statement = statement
        self.keepalive = keepalive
    }

    /// Reads the three variables; throws ``SettingsError`` naming the one
    /// that is out of range.
    public init(environment: [String: String]) throws {
        func value(_ name: String) -> String? {
            guard let v = environment[name]?.trimmingCharacters(in: .whitespaces), !v.isEmpty else { return nil }
            return v
        }
        let standard = Self.standard
        connect = try SettingValue.integer(value("DATABASE_CONNECT_TIMEOUT"), name: "DATABASE_CONNECT_TIMEOUT",
                                             default: standard.connect, range: 1...300)
        statement = try SettingValue.integer(value("DATABASE_STATEMENT_TIMEOUT"), name: "DATABASE_STATEMENT_TIMEOUT",
                                               default: standard.statement, range: 1...3600)
        keepalive = try SettingValue.integer(value("DATABASE_KEEPALIVE"), name: "DATABASE_KEEPALIVE",
                                               default: standard.keepalive, range: 1...3600)
    }

    /// Seconds between keepalive probes.
    public var keepaliveInterval: Int { max(1, keepalive / 2) }
    /// Seconds after which a silent peer is dead: idle time plus every probe.
    public var deadPeer: Int { keepalive + keepaliveInterval * Self.keepaliveProbes }
}
