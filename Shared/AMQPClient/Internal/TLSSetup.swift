import CAMQPTLS
// Not used here, but without it release (whole-module) builds find none of
// amqp.h's AMQP_STATUS_* constants in this file ("cannot find
// 'AMQP_STATUS_OK' in scope"): the modules that include amqp.h textually
// each own a copy, and the constants resolve through this one, as in
// CConnection.swift.
import CAMQPWriteBuffer
import CRabbitMQ
import Foundation

/// TLS on rabbitmq-c's OpenSSL socket: the files checked before any
/// connect, the socket's settings, and every TLS failure turned into a
/// ``AMQPError/Code/tlsFailed`` that names the file or host and the reason.
///
/// rabbitmq-c 0.11 says only "SSL peer cert verification failed" or "SSL
/// hostname verification failed"; the reason comes from CAMQPTLS, which
/// watches OpenSSL's verification of the library's own context.
/// Runs on the connection's I/O thread (CAMQPTLS keeps its record per thread).
enum TLSSetup {
    /// Debian's system CA bundle, used when no CA file is configured.
    static let systemBundle = "/etc/ssl/certs/ca-certificates.crt"

    /// Refuses client-certificate settings on a plain `amqp://` URL: the
    /// certificate would go unused and the login would cross in clear.
    static func checkPlain(_ config: AMQPConfiguration, url: AMQPURL) throws(AMQPError) {
        if config.tlsClientCertificatePath != nil || config.authMechanism == .external {
            throw AMQPError(.tlsFailed, "a client certificate or EXTERNAL login is configured but \(url) is not TLS: use amqps:// (never a plain fallback)")
        }
    }

    /// Checks the configured files and applies the settings to `socket`
    /// (from `amqp_ssl_socket_new`), before it is opened.
    static func configure(_ socket: OpaquePointer, _ config: AMQPConfiguration) throws(AMQPError) {
        let ca = config.tlsCACertificatePath ?? systemBundle
        if config.tlsCACertificatePath != nil || FileManager.default.fileExists(atPath: ca) {
            if let reason = check({ crabbitmq_tls_check_ca_file(ca, $0, $1) }) {
                throw AMQPError(.tlsFailed, "CA file \(ca): \(reason)")
            }
            let status = amqp_ssl_socket_set_cacert(socket, ca)
            if status != AMQP_STATUS_OK.rawValue {
                throw AMQPError(.tlsFailed, "CA file \(ca): OpenSSL cannot load it (\(lastOpenSSLError() ?? CConnection.errorString(status)))",
                                libraryStatus: status)
            }
        }
        if let certificate = config.tlsClientCertificatePath, let key = config.tlsClientKeyPath {
            if let reason = check({ crabbitmq_tls_check_certificate_file(certificate, $0, $1) }) {
                throw AMQPError(.tlsFailed, "client certificate file \(certificate): \(reason)")
            }
            if let reason = check({ crabbitmq_tls_check_key_file(key, certificate, $0, $1) }) {
                throw AMQPError(.tlsFailed, "client key file \(key): \(reason)")
            }
            let status = amqp_ssl_socket_set_key(socket, certificate, key)
            if status != AMQP_STATUS_OK.rawValue {
                throw AMQPError(.tlsFailed, "client certificate \(certificate) with key \(key): OpenSSL cannot use them (\(lastOpenSSLError() ?? CConnection.errorString(status)))",
                                libraryStatus: status)
            }
        }
        amqp_ssl_socket_set_verify_peer(socket, config.tlsVerifyPeer ? 1 : 0)
        amqp_ssl_socket_set_verify_hostname(socket, config.tlsVerifyPeer && config.tlsSkipHostnameCheckReason == nil ? 1 : 0)
        _ = crabbitmq_tls_watch(socket)
    }

    /// The error of a failed `amqp_socket_open` on a TLS socket, or nil
    /// when the failure is not about TLS (refused, unreachable, timeout).
    static func openFailure(status: Int32, url: AMQPURL, config: AMQPConfiguration) -> AMQPError? {
        let at = "\(url.host):\(url.port)"
        switch status {
        case AMQP_STATUS_SSL_PEER_VERIFY_FAILED.rawValue:
            let reason = text({ crabbitmq_tls_verification_failure($0, $1) }) ?? "the broker sent no certificate"
            return AMQPError(.tlsFailed, "the broker's certificate at \(at) does not verify against \(caDescription(config)): \(reason)",
                             libraryStatus: status)
        case AMQP_STATUS_SSL_HOSTNAME_VERIFY_FAILED.rawValue:
            let names = text({ crabbitmq_tls_peer_names($0, $1) }) ?? "no names"
            return AMQPError(.tlsFailed, "the broker's certificate at \(at) does not name the host '\(url.host)' (it names \(names)): connect by one of those names, or give the broker a certificate that names '\(url.host)'",
                             libraryStatus: status)
        case AMQP_STATUS_SSL_CONNECTION_FAILED.rawValue, AMQP_STATUS_SSL_ERROR.rawValue:
            let reason = lastOpenSSLError() ?? "no detail from OpenSSL"
            if let refusal = refusal(reason, config: config) {
                return AMQPError(.tlsFailed, "TLS handshake with \(at) failed: \(refusal)", libraryStatus: status)
            }
            if reason.contains("wrong version number") || reason.contains("packet length too long") || reason.contains("unknown protocol") {
                return AMQPError(.tlsFailed, "TLS handshake with \(at) failed (\(reason)): is that a plain AMQP port? amqps:// needs the broker's TLS port (5671)",
                                 libraryStatus: status)
            }
            // Reset during the handshake (a broker starting or stopping): waited out.
            return AMQPError(.connectionFailed, "TLS handshake with \(at) failed: \(reason)", libraryStatus: status)
        default:
            return nil
        }
    }

    /// After a login that failed on a TLS connection: the broker's alert,
    /// when it refused our certificate after the handshake (TLS 1.3
    /// checks the client certificate once the client has finished).
    ///
    /// The broker's alert is usually still in OpenSSL's error queue; when
    /// a reset overtook it, a session of our own (sending nothing) asks the
    /// broker again.
    static func loginFailure(url: AMQPURL, config: AMQPConfiguration) -> AMQPError? {
        var reason = lastOpenSSLError()
        if reason.map({ refusal($0, config: config) == nil }) ?? true {
            reason = text({
                crabbitmq_tls_probe_client_certificate(url.host, Int32(url.port), config.tlsClientCertificatePath,
                                                       config.tlsClientKeyPath, 2000, $0, $1)
            })
        }
        guard let reason, let refusal = refusal(reason, config: config) else { return nil }
        return AMQPError(.tlsFailed, "the broker at \(url.host):\(url.port) ended the TLS session: \(refusal)")
    }

    /// A TLS alert that means the broker refused our certificate (or its absence), in words.
    private static func refusal(_ reason: String, config: AMQPConfiguration) -> String? {
        guard reason.contains("alert") else { return nil }
        if reason.contains("certificate required") || (config.tlsClientCertificatePath == nil && reason.contains("handshake failure")) {
            return "the broker requires a client certificate (\(reason)): set AMQP_CERT_FILE and AMQP_KEY_FILE"
        }
        if let certificate = config.tlsClientCertificatePath {
            return "the broker refused the client certificate \(certificate) (\(reason)): is it signed by a CA the broker trusts, and still valid?"
        }
        return "the broker refused the connection (\(reason))"
    }

    private static func caDescription(_ config: AMQPConfiguration) -> String {
        if let ca = config.tlsCACertificatePath { return "the CA file \(ca)" }
        return "the system CA bundle \(systemBundle) (a private CA needs AMQP_CA_FILE)"
    }

    private static func lastOpenSSLError() -> String? {
        text({ crabbitmq_tls_last_error($0, $1) })
    }

    /// Calls a CAMQPTLS check; the reason when it failed.
    private static func check(_ body: (UnsafeMutablePointer<CChar>, Int) -> Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: 512)
        let status = buffer.withUnsafeMutableBufferPointer { body($0.baseAddress!, $0.count) }
        return status == 0 ? nil : String(cString: buffer)
    }

    /// Calls a CAMQPTLS reader; its text when it had one.
    private static func text(_ body: (UnsafeMutablePointer<CChar>, Int) -> Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: 512)
        let found = buffer.withUnsafeMutableBufferPointer { body($0.baseAddress!, $0.count) }
        return found == 1 ? String(cString: buffer) : nil
    }

    /// The common name of the client certificate, for messages about an EXTERNAL login.
    static func commonName(_ path: String) -> String? {
        text({ crabbitmq_tls_certificate_common_name(path, $0, $1) })
    }
}
