import AMQPClient
import ArgumentParser
import BookingContracts
import Foundation
import BrokerObjects
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `bookingctl topology upgrade`: brings a broker whose topology an earlier
/// version declared up to contract v1.1.
///
/// `booking.commands` cannot be re-declared with the `alternate-exchange`
/// argument (RabbitMQ answers PRECONDITION_FAILED), and services never
/// re-declare or delete it; so the alternate exchange comes from a policy,
/// which only the management API (or rabbitmqctl) can set — not AMQP.
/// Steps, each idempotent: declare the contract's exchanges, queues and
/// bindings over AMQP (the new `booking.commands.unrouted` and its binding
/// to `booking-handler.commands`), then `PUT` the policy, then read
/// `booking.commands` back to check the policy applies.
struct TopologyUpgrade: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "upgrade",
        abstract: "Upgrade a broker's topology to contract v1.1 (the alternate exchange of booking.commands).",
        discussion: """
            Run with a broker user tagged administrator (or policymaker): it declares the
            contract's exchanges, queues and bindings over AMQP and sets the policy
            '\(Topology.commandsAlternateExchangePolicy.name)' through the management API, so
            commands whose routing key names no command type reach the booking handler and
            get the 1001 reply instead of coming back unroutable. Idempotent.

            Example:
              bookingctl topology upgrade --amqp-url amqp://admin:secret@rabbitmq:5672/%2f \\
                  --management-url http://rabbitmq:15672
            """)

    @OptionGroup var global: GlobalOptions

    @Option(help: "Management API base URL (default: http://<broker host>:15672). Logs in as the AMQP URL's user.")
    var managementURL: String?

    func run() async throws {
        try await reportingErrors {
            let broker = try global.brokerURL()
            let connection = try await CommandClient(global: global).connect()
            do {
                try await connection.declare(ContractTopology.declarations(
                    queues: Topology.serviceQueues.map(\.name) + [Topology.passesFailedQueue]))
            } catch {
                await connection.close()
                throw CLIError("declaring the topology failed: \(error)")
            }
            await connection.close()
            let api = try ManagementAPI(baseURL: managementURL ?? "http://\(broker.host):15672", user: broker.user,
                                        password: broker.password, timeout: global.timeout)
            let policy = Topology.commandsAlternateExchangePolicy
            try await api.putPolicy(vhost: broker.vhost, name: policy.name, pattern: policy.pattern,
                                    definition: ["alternate-exchange": Topology.commandsUnroutedExchange])
            let applied = try await api.exchangePolicy(vhost: broker.vhost, exchange: Topology.commandsExchange)
            guard applied == policy.name else {
                throw CLIError("the policy was set, but \(Topology.commandsExchange) shows policy '\(applied ?? "none")' "
                               + "(a policy of higher priority matches it?)")
            }
            if global.json {
                print(try Output.json(["policy": policy.name, "exchange": Topology.commandsExchange,
                                       "alternateExchange": Topology.commandsUnroutedExchange]))
            } else {
                print("\(Topology.commandsExchange): alternate exchange \(Topology.commandsUnroutedExchange) "
                      + "(policy \(policy.name)); commands with unknown routing keys now get 1001")
            }
        }
    }
}

/// The few calls of RabbitMQ's management HTTP API that `topology upgrade`
/// needs, with basic auth. Errors name the call and the status, never the
/// password.
struct ManagementAPI {
    let base: URL
    let authorization: String
    let timeout: Double

    init(baseURL: String, user: String, password: String, timeout: Double) throws {
        guard let url = URL(string: baseURL), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw CLIError("--management-url '\(baseURL)' is not an http:// or https:// URL")
        }
        base = url
        authorization = "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
        self.timeout = timeout
    }

    /// `PUT /api/policies/{vhost}/{name}` for exchanges.
    func putPolicy(vhost: String, name: String, pattern: String, definition: [String: String]) async throws {
        let body: [String: Any] = ["pattern": pattern, "definition": definition, "apply-to": "exchanges", "priority": 0]
        let (status, text) = try await send("PUT", "api/policies/\(escape(vhost))/\(escape(name))",
                                            body: try JSONSerialization.data(withJSONObject: body))
        guard (200..<300).contains(status) else {
            throw CLIError("setting policy \(name) failed: HTTP \(status) \(text.prefix(300))"
                           + (status == 401 || status == 403 ? " (the user needs the administrator or policymaker tag)" : ""))
        }
    }

    /// The policy applied to `exchange` (`GET /api/exchanges/{vhost}/{name}`).
    func exchangePolicy(vhost: String, exchange: String) async throws -> String? {
        let (status, text) = try await send("GET", "api/exchanges/\(escape(vhost))/\(escape(exchange))", body: nil)
        guard status == 200, let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
            throw CLIError("reading exchange \(exchange) failed: HTTP \(status) \(text.prefix(300))")
        }
        return object["policy"] as? String
    }

    /// A path segment percent-encoded (`/` → `%2F`).
    private func escape(_ segment: String) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove("/")
        return segment.addingPercentEncoding(withAllowedCharacters: allowed) ?? segment
    }

    private func send(_ method: String, _ path: String, body: Data?) async throws -> (Int, String) {
        // Appended as text: URL.appendingPathComponent would encode the
        // already encoded `%2F` of the default vhost again.
        let text = base.absoluteString.hasSuffix("/") ? base.absoluteString + path : base.absoluteString + "/" + path
        guard let url = URL(string: text) else { throw CLIError("bad management URL \(text)") }
        var request = URLRequest(url: url, timeoutInterval: timeout)
        request.httpMethod = method
        request.setValue(authorization, forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = body
        return try await withCheckedThrowingContinuation { continuation in
            URLSession.shared.dataTask(with: request) { data, response, error in
                if let error {
                    continuation.resume(throwing: CLIError("management API at \(base.absoluteString) unreachable: "
                                                           + error.localizedDescription, exit: ExitCode(69)))
                    return
                }
                let status = (response as? HTTPURLResponse)?.statusCode ?? 0
                continuation.resume(returning: (status, String(decoding: data ?? Data(), as: UTF8.self)))
            }.resume()
        }
    }
}
