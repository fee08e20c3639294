import Foundation
import Logging

/// Log output formats (`LOG_FORMAT`).
public enum LogFormat: String, Sendable {
    /// One human-readable line per event (swift-log's stream handler).
    case text
    /// One JSON object per line, metadata as dotted keys, for log shippers.
    case json
}

/// Bootstraps swift-log once per process.
public enum LogSetup {
    /// Installs the handler for `format` at `level`. Call once, first thing in `main`.
    ///
    /// `metadataProvider` adds metadata of the task's context to every
    /// line (the trace's `trace_id` and `span_id`: ``TraceSetup/logMetadataProvider``).
    public static func bootstrap(format: LogFormat, level: Logger.Level, metadataProvider: Logger.MetadataProvider? = nil) {
        LoggingSystem.bootstrap({ label, provider in
            var handler: any LogHandler
            switch format {
            case .text: handler = StreamLogHandler.standardError(label: label, metadataProvider: provider)
            case .json:
                var json = JSONLogHandler(label: label)
                json.metadataProvider = provider
                handler = json
            }
            handler.logLevel = level
            return handler
        }, metadataProvider: metadataProvider)
    }
}

/// Writes one JSON object per log event to standard error:
/// `{"ts":…,"level":…,"logger":…,"msg":…,"<metadata key>":…}`.
public struct JSONLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private static let lock = NSLock()

    public init(label: String) {
        self.label = label
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var object: [String: Any] = [
            "ts": ISO8601DateFormatter.string(from: Date(), timeZone: .gmt, formatOptions: [.withInternetDateTime, .withFractionalSeconds]),
            "level": event.level.rawValue,
            "logger": label,
            "msg": event.message.description,
            "source": event.source,
        ]
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        for (key, value) in merged { object[key] = Self.plain(value) }
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else { return }
        Self.lock.withLock {
            FileHandle.standardError.write(data + Data("\n".utf8))
        }
    }

    private static func plain(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let s): return s
        case .stringConvertible(let s): return s.description
        case .array(let a): return a.map(plain)
        case .dictionary(let d): return d.mapValues(plain)
        }
    }
}
