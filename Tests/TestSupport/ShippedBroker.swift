import AMQPClient
import Foundation

/// A virtual host set up from the shipped broker definitions
/// (`deploy/rabbitmq/definitions.json`): the same users, permissions, topic
/// permissions, exchanges, queues and policies as in docker-compose, moved
/// into a vhost of its own on the test broker, plus outside systems made
/// the way an operator would add one: a copy of `external-publisher` under
/// another name.
///
/// Why the real file: the authorization tests must fail when the shipped
/// permissions are wrong, not only when the handler is.
///
/// Differences from the shipped broker, on purpose: passwords are known to
/// the tests (`test-<user>`); per-user connection and channel limits are
/// dropped (users are global to the broker, and the suites run many vhosts
/// one after another on it); `guest` gets full rights on the vhost to
/// inspect and to play a compromised peer.
public struct ShippedVhost: Sendable {
    /// The guest URL of the vhost (full rights).
    public let adminURL: AMQPURL
    /// The vhost's name.
    public var vhost: String { adminURL.vhost }

    /// The URL of `user` (a shipped user or one of the added outside systems).
    public func url(_ user: String) -> AMQPURL {
        var url = adminURL
        url.user = user
        url.password = ShippedBroker.password(of: user)
        return url
    }

    /// Removes the vhost (best effort).
    public func delete() { TestBroker.deleteVhost(vhost) }
}

/// Imports the shipped definitions into fresh vhosts; see ``ShippedVhost``.
public enum ShippedBroker {
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The test password of `user`.
    public static func password(of user: String) -> String { "test-\(user)" }

    /// A new vhost with the shipped definitions and `outsideSystems`, each
    /// with exactly `external-publisher`'s permissions over its own name.
    public static func vhost(_ prefix: String = "shipped", outsideSystems: [String] = []) throws -> ShippedVhost {
        var admin = try TestBroker.isolatedURL(prefix)
        let vhost = admin.vhost
        let definitions = try render(into: vhost, outsideSystems: outsideSystems, adminUser: admin.user)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("\(vhost).definitions.json")
        try definitions.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        _ = try TestBroker.ctl(["import_definitions", file.path])
        admin.vhost = vhost
        return ShippedVhost(adminURL: admin)
    }

    /// The shipped file with every `@HASH:VAR@` rendered by the shipped
    /// script (`render-definitions.sh`), every vhost `/` renamed to
    /// `vhost`, user limits dropped and the outside systems added.
    static func render(into vhost: String, outsideSystems: [String], adminUser: String) throws -> Data {
        let template = repositoryRoot.appendingPathComponent("deploy/rabbitmq/definitions.json")
        let script = repositoryRoot.appendingPathComponent("deploy/rabbitmq/render-definitions.sh")
        guard var root = try JSONSerialization.jsonObject(with: Data(contentsOf: template)) as? [String: Any],
              var users = root["users"] as? [[String: Any]] else {
            throw NodeError("deploy/rabbitmq/definitions.json has no users")
        }
        var permissions = root["permissions"] as? [[String: Any]] ?? []
        var topicPermissions = root["topic_permissions"] as? [[String: Any]] ?? []
        // The outside systems: copies of external-publisher, each with its
        // own name in the permission patterns and its own password.
        let model = "external-publisher"
        guard let modelUser = users.first(where: { $0["name"] as? String == model }),
              let modelPermission = permissions.first(where: { $0["user"] as? String == model }) else {
            throw NodeError("the definitions have no external-publisher user to copy")
        }
        let modelTopics = topicPermissions.filter { $0["user"] as? String == model }
        for (index, name) in outsideSystems.enumerated() {
            var user = modelUser
            user["name"] = name
            user["password_hash"] = "@HASH:OUTSIDE_SYSTEM_\(index)_PASSWORD@"
            users.append(user)
            var permission: [String: Any] = [:]
            for (key, value) in modelPermission {
                permission[key] = (value as? String).map {
                    $0.replacingOccurrences(of: "external\\-publisher", with: escaped(name))
                        .replacingOccurrences(of: model, with: escaped(name))
                } ?? value
            }
            permission["user"] = name
            permissions.append(permission)
            for topic in modelTopics {
                var copy = topic
                copy["user"] = name
                topicPermissions.append(copy)
            }
        }
        var environment = ProcessInfo.processInfo.environment
        for (index, user) in users.enumerated() {
            guard let name = user["name"] as? String, let hash = user["password_hash"] as? String,
                  hash.hasPrefix("@HASH:"), hash.hasSuffix("@") else { continue }
            environment[String(hash.dropFirst(6).dropLast())] = password(of: name)
            users[index]["limits"] = [String: Any]()
        }
        permissions.append(["user": adminUser, "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"])
        root["users"] = users
        root["permissions"] = permissions
        root["topic_permissions"] = topicPermissions
        root["vhosts"] = [["name": "/"]]
        root.removeValue(forKey: "global_parameters")
        root.removeValue(forKey: "parameters")

        let temp = FileManager.default.temporaryDirectory
        let input = temp.appendingPathComponent("template-\(UUID().uuidString).json")
        let rendered = temp.appendingPathComponent("rendered-\(UUID().uuidString).json")
        defer {
            try? FileManager.default.removeItem(at: input)
            try? FileManager.default.removeItem(at: rendered)
        }
        try JSONSerialization.data(withJSONObject: root).write(to: input)
        try run(["/bin/bash", script.path, input.path, rendered.path], environment: environment)
        guard var out = try JSONSerialization.jsonObject(with: Data(contentsOf: rendered)) as? [String: Any] else {
            throw NodeError("render-definitions.sh wrote no JSON object")
        }
        // Everything of vhost "/" moves into the test's vhost.
        for key in ["vhosts", "permissions", "topic_permissions", "queues", "exchanges", "bindings", "policies"] {
            out[key] = ((out[key] as? [[String: Any]]) ?? []).map { item -> [String: Any] in
                var item = item
                if item["vhost"] as? String == "/" { item["vhost"] = vhost }
                if key == "vhosts", item["name"] as? String == "/" { item["name"] = vhost }
                return item
            }
        }
        return try JSONSerialization.data(withJSONObject: out)
    }

    /// `name` with the regex metacharacters RabbitMQ user names may hold escaped.
    static func escaped(_ name: String) -> String {
        name.replacingOccurrences(of: ".", with: "\\.").replacingOccurrences(of: "-", with: "\\-")
    }

    static func run(_ arguments: [String], environment: [String: String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: arguments[0])
        process.arguments = Array(arguments.dropFirst())
        process.environment = environment
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            throw NodeError("\(arguments.joined(separator: " ")) failed: \(text)")
        }
    }
}
