import AMQPClient
import Logging
import ServiceSettings
import Testing
@testable import ServiceSupport

/// The operations contract's environment variables: defaults, parsing, and
/// errors that name the variable without echoing secrets.
@Suite("Service settings")
struct SettingsTests {
    @Test func defaultsMatchTheDocumentation() throws {
        let s = try CommonSettings(environment: [:], defaultHTTPPort: 8081)
        #expect(s.amqpURL == AMQPURL.default)
        #expect(s.amqpURLs == [AMQPURL.default])
        #expect(s.amqpConfiguration(connectionName: "x").failoverURLs.isEmpty)
        #expect(s.dataDirectory == "./.data")
        #expect(s.httpPort == 8081)
        #expect(s.logLevel == .info)
        #expect(s.logFormat == .text)
        #expect(s.heartbeatSeconds == 10)
        #expect(s.initialConnectTimeoutSeconds == 60)
        #expect(s.tlsCAFile == nil)
    }

    @Test func aClusterInAMQPURLBecomesFailoverNodes() throws {
        let s = try CommonSettings(environment: ["AMQP_URL": "amqp://svc:pw@n1:5672,n2:5673,n3:5674/prod"],
                                   defaultHTTPPort: 8080)
        let c = s.amqpConfiguration(connectionName: "x")
        #expect(c.endpoints.map(\.port) == [5672, 5673, 5674])
        #expect(c.endpoints.map(\.host) == ["n1", "n2", "n3"])
        #expect(Set(c.endpoints.map(\.vhost)) == ["prod"])
        #expect(throws: SettingsError.self) {
            _ = try CommonSettings(environment: ["AMQP_URL": "amqp://svc:pw@n1,,n3/prod"], defaultHTTPPort: 8080)
        }
    }

    @Test func valuesAreParsed() throws {
        let s = try CommonSettings(environment: [
            "AMQP_URL": "amqps://svc:p%40ss@rabbit:5671/prod", "DATA_DIR": "/var/lib/x", "HTTP_PORT": "9000",
            "LOG_LEVEL": "WARN", "LOG_FORMAT": "json", "AMQP_HEARTBEAT": "0", "AMQP_CONNECT_TIMEOUT": "5",
        ], defaultHTTPPort: 8080)
        #expect(s.amqpURL.tls)
        #expect(s.amqpURL.password == "p@ss")
        #expect(s.amqpURL.vhost == "prod")
        #expect(s.dataDirectory == "/var/lib/x")
        #expect(s.httpPort == 9000)
        #expect(s.logLevel == .warning)
        #expect(s.logFormat == .json)
        #expect(s.heartbeatSeconds == 0)
        #expect(s.amqpConfiguration(connectionName: "x").initialConnectTimeoutSeconds == 5)
    }

    @Test func transportSecurityReachesTheConfiguration() throws {
        let s = try CommonSettings(environment: [
            "AMQP_URL": "amqps://svc@rabbit:5671/prod", "AMQP_CERT_FILE": "/etc/svc.pem", "AMQP_KEY_FILE": "/etc/svc.key",
            "AMQP_AUTH_MECHANISM": "external", "AMQP_TLS_SKIP_HOSTNAME_CHECK": "reached through a tunnel",
        ], defaultHTTPPort: 8080)
        let c = s.amqpConfiguration(connectionName: "x")
        #expect(c.tlsClientCertificatePath == "/etc/svc.pem" && c.tlsClientKeyPath == "/etc/svc.key")
        #expect(c.authMechanism == .external)
        #expect(c.tlsSkipHostnameCheckReason == "reached through a tunnel")
        let plain = try CommonSettings(environment: [:], defaultHTTPPort: 8080).amqpConfiguration(connectionName: "x")
        #expect(plain.authMechanism == .plain && plain.tlsClientCertificatePath == nil && plain.tlsSkipHostnameCheckReason == nil)
    }

    @Test(arguments: [
        ("AMQP_URL", "http://user:topsecret@host", "AMQP_URL"),
        ("HTTP_PORT", "70000", "HTTP_PORT"),
        ("LOG_LEVEL", "loud", "LOG_LEVEL"),
        ("LOG_FORMAT", "xml", "LOG_FORMAT"),
        ("AMQP_HEARTBEAT", "-1", "AMQP_HEARTBEAT"),
        ("AMQP_CA_FILE", "/no/such/ca.pem", "AMQP_CA_FILE"),
        ("AMQP_CERT_FILE", "/etc/client.pem", "AMQP_CERT_FILE"),
        ("AMQP_KEY_FILE", "/etc/client.key", "AMQP_KEY_FILE"),
        ("AMQP_AUTH_MECHANISM", "KERBEROS", "AMQP_AUTH_MECHANISM"),
        ("AMQP_TLS_SKIP_HOSTNAME_CHECK", "yes", "AMQP_TLS_SKIP_HOSTNAME_CHECK"),
    ])
    func badValuesNameTheVariable(name: String, value: String, mentioned: String) throws {
        let error = #expect(throws: SettingsError.self) {
            _ = try CommonSettings(environment: [name: value], defaultHTTPPort: 1)
        }
        #expect(error?.description.hasPrefix(mentioned) == true)
        #expect(error?.description.contains("topsecret") == false)
    }
}
