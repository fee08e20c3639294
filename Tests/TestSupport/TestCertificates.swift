import Foundation

/// Certificates made by `openssl` for TLS tests: private CAs and the
/// server and client certificates they sign, valid or expired, in a
/// directory of the test.
public struct TestCertificates: Sendable {
    /// A certificate and its unencrypted key (PEM files).
    public struct Pair: Sendable {
        public let certificate: String
        public let key: String
    }

    /// Where the files are.
    public let directory: String

    /// Uses `directory` (created if needed).
    public init(directory: String) throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    /// A new self-signed CA, `name`.pem and `name`.key.
    public func authority(_ name: String) throws -> Pair {
        let pair = Pair(certificate: "\(directory)/\(name).pem", key: "\(directory)/\(name).key")
        try openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=\(name)",
                     "-keyout", pair.key, "-out", pair.certificate])
        return pair
    }

    /// A certificate `name`.pem (with `name`.key) for `commonName`, naming
    /// `subjectAltNames` (`DNS:localhost`, `IP:127.0.0.1`), signed by
    /// `authority`. `expired`: valid only on 1-2 January 2020.
    public func issue(_ name: String, commonName: String, subjectAltNames: [String] = [], by authority: Pair,
                      expired: Bool = false) throws -> Pair {
        let pair = Pair(certificate: "\(directory)/\(name).pem", key: "\(directory)/\(name).key")
        let request = "\(directory)/\(name).csr"
        try openssl(["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=\(commonName)", "-keyout", pair.key, "-out", request])
        var extensions = "basicConstraints=CA:FALSE\n"
        if !subjectAltNames.isEmpty { extensions += "subjectAltName=\(subjectAltNames.joined(separator: ","))\n" }
        let extensionFile = "\(directory)/\(name).ext"
        try extensions.write(toFile: extensionFile, atomically: true, encoding: .utf8)
        if expired {
            // `openssl ca` is the tool that takes explicit dates.
            let database = "\(directory)/\(name).ca"
            try FileManager.default.createDirectory(atPath: database, withIntermediateDirectories: true)
            try "".write(toFile: "\(database)/index", atomically: true, encoding: .utf8)
            try "01\n".write(toFile: "\(database)/serial", atomically: true, encoding: .utf8)
            let config = """
                [ca]
                default_ca = test
                [test]
                database = \(database)/index
                new_certs_dir = \(database)
                serial = \(database)/serial
                default_md = sha256
                policy = any
                [any]
                commonName = supplied

                """
            try config.write(toFile: "\(database)/ca.cnf", atomically: true, encoding: .utf8)
            try openssl(["ca", "-batch", "-notext", "-config", "\(database)/ca.cnf", "-cert", authority.certificate,
                         "-keyfile", authority.key, "-in", request, "-out", pair.certificate, "-extfile", extensionFile,
                         "-startdate", "20200101000000Z", "-enddate", "20200102000000Z"])
        } else {
            try openssl(["x509", "-req", "-in", request, "-CA", authority.certificate, "-CAkey", authority.key,
                         "-CAcreateserial", "-days", "30", "-extfile", extensionFile, "-out", pair.certificate])
        }
        // The broker runs as another user and must read its key.
        for file in [pair.certificate, pair.key] {
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file)
        }
        return pair
    }

    private func openssl(_ arguments: [String]) throws {
        try Command.run("/usr/bin/openssl", arguments)
    }
}
