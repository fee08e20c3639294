import Foundation
import NIOSSL
import PostgresNIO
import ServiceSupport

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
        configuration.options.connectTimeout = .seconds(10)
        // Startup parameters hold for every statement of the connection and
        // every reconnect:
        // - a write transaction holds the lock every instance's writes wait
        //   for; if its client vanishes (host lost, partitioned, frozen)
        //   the server ends the session after 15 s idle in the transaction,
        //   and keepalives notice a dead peer within about 25 s, instead of
        //   the operating system's two hours;
        // - the schema's tables first, `public` for the extension it holds.
        var parameters = [("idle_in_transaction_session_timeout", "15000"), ("tcp_keepalives_idle", "10"),
                          ("tcp_keepalives_interval", "5"), ("tcp_keepalives_count", "3")]
        if let schema { parameters.append(("search_path", "\(schema), public")) }
        configuration.options.additionalStartupParameters = parameters
        return configuration
    }
}
