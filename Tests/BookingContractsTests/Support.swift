import BookingContracts
import Foundation
import Testing

/// A parsed JSON value, for comparing documents structurally (key order and
/// whitespace do not matter; `true` and `1` stay different).
enum JSONValue: Decodable, Equatable, CustomStringConvertible {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
        } else if let b = try? c.decode(Bool.self) {
            self = .bool(b)
        } else if let n = try? c.decode(Double.self) {
            self = .number(n)
        } else if let s = try? c.decode(String.self) {
            self = .string(s)
        } else if let a = try? c.decode([JSONValue].self) {
            self = .array(a)
        } else {
            self = .object(try c.decode([String: JSONValue].self))
        }
    }

    init(parsing data: Data) throws {
        self = try JSONDecoder().decode(JSONValue.self, from: data)
    }

    init(parsing text: String) throws {
        try self.init(parsing: Data(text.utf8))
    }

    subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    var description: String {
        switch self {
        case .null: "null"
        case .bool(let b): String(b)
        case .number(let n): String(n)
        case .string(let s): "\"\(s)\""
        case .array(let a): "[" + a.map(\.description).joined(separator: ",") + "]"
        case .object(let o):
            "{" + o.keys.sorted().map { "\"\($0)\":\(o[$0]!.description)" }.joined(separator: ",") + "}"
        }
    }
}

/// Encodes with the contract encoder and parses the result.
func encodedJSON<T: Encodable>(_ value: T) throws -> JSONValue {
    try JSONValue(parsing: ContractJSON.encode(value))
}

/// Encode → decode → equal, and encode again → same bytes (stable output).
func expectRoundTrip<T: Codable & Equatable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let data = try ContractJSON.encode(value)
    let decoded = try ContractJSON.decode(T.self, from: data)
    #expect(decoded == value, "round trip changed \(T.self)", sourceLocation: sourceLocation)
    #expect(try ContractJSON.encode(decoded) == data, "re-encoding \(T.self) is not stable",
            sourceLocation: sourceLocation)
}

/// Where the repository lives: found from this file's path (following the
/// symlinks of a scratch package), or `CONTRACT_REPO_ROOT`.
enum Repo {
    static let root: URL = {
        let marker = "scripts/validate_contract.py"
        if let env = ProcessInfo.processInfo.environment["CONTRACT_REPO_ROOT"], !env.isEmpty {
            return URL(fileURLWithPath: env)
        }
        let testsDir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        let candidates = [
            testsDir.resolvingSymlinksInPath().deletingLastPathComponent().deletingLastPathComponent(),
            testsDir.deletingLastPathComponent().deletingLastPathComponent(),
        ]
        for candidate in candidates
        where FileManager.default.fileExists(atPath: candidate.appendingPathComponent(marker).path) {
            return candidate
        }
        return candidates[0]
    }()

    static var script: URL { root.appendingPathComponent("scripts/validate_contract.py") }
    static var contractDir: URL { root.appendingPathComponent("docs/contract") }
    static var examplesDir: URL { contractDir.appendingPathComponent("examples") }
}

/// A fresh temporary directory.
func makeTemporaryDirectory(_ label: String) throws -> URL {
    let url = FileManager.default.temporaryDirectory
        .appendingPathComponent("booking-contracts-\(label)-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// Runs `python3 scripts/validate_contract.py <arguments>`; returns the exit
/// status and the combined output.
func runValidator(_ arguments: [String]) async throws -> (status: Int32, output: String) {
    let outputDir = try makeTemporaryDirectory("validator-output")
    defer { try? FileManager.default.removeItem(at: outputDir) }
    let outputFile = outputDir.appendingPathComponent("output.txt")
    _ = FileManager.default.createFile(atPath: outputFile.path, contents: nil)
    let handle = try FileHandle(forWritingTo: outputFile)

    let python = ProcessInfo.processInfo.environment["PYTHON"] ?? "python3"
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = [python, Repo.script.path] + arguments
    process.standardOutput = handle
    process.standardError = handle
    process.standardInput = FileHandle.nullDevice

    let status: Int32 = try await withCheckedThrowingContinuation { continuation in
        process.terminationHandler = { finished in continuation.resume(returning: finished.terminationStatus) }
        do {
            try process.run()
        } catch {
            process.terminationHandler = nil
            continuation.resume(throwing: error)
        }
    }
    try handle.close()
    let output = (try? String(contentsOf: outputFile, encoding: .utf8)) ?? ""
    return (status, output)
}
