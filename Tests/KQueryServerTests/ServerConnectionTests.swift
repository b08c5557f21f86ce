import KQuery
import KQueryServer
import Testing

import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Connections that misbehave at the socket level: thousands at once, bodies that never finish,
/// clients that leave mid-request. The server answers everyone else, applies nothing half-sent,
/// and keeps serving.
@Suite struct ServerConnectionTests {
    /// A blocking TCP connection to 127.0.0.1, for raw HTTP/1.1 bytes.
    final class RawConnection: @unchecked Sendable {
        let descriptor: Int32

        init(port: Int) throws {
            descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard descriptor >= 0 else { throw RawConnectionError("socket: errno \(errno)") }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var timeout = timeval(tv_sec: 20, tv_usec: 0)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else {
                close(descriptor)
                throw RawConnectionError("connect: errno \(errno)")
            }
        }

        func send(_ text: String) throws {
            let bytes = Array(text.utf8)
            var sent = 0
            while sent < bytes.count {
                let n = bytes[sent...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                guard n > 0 else { throw RawConnectionError("send: errno \(errno)") }
                sent += n
            }
        }

        /// Reads until the peer closes or a whole response with a Content-Length has arrived.
        func receiveResponse() -> String {
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                if n <= 0 { break }
                received += buffer[0..<n]
                let text = String(decoding: received, as: UTF8.self)
                if let headerEnd = text.range(of: "\r\n\r\n") {
                    let head = text[..<headerEnd.lowerBound].lowercased()
                    if let line = head.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }),
                       let length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)),
                       text.utf8.count - text[..<headerEnd.upperBound].utf8.count >= length {
                        break
                    }
                }
            }
            return String(decoding: received, as: UTF8.self)
        }

        deinit { close(descriptor) }
    }

    struct RawConnectionError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// Runs blocking socket work on a thread of its own, off Swift's cooperative pool (which the
    /// in-process server needs).
    static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    static func request(_ method: String, _ path: String, body: String, declaredLength: Int? = nil) -> String {
        "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(declaredLength ?? body.utf8.count)\r\n\r\n\(body)"
    }

    static let modifyPath = "/database/1/iCloud.com.example.tests/development/public/records/modify?ckAPIToken=test-token"
    static let queryPath = "/database/1/iCloud.com.example.tests/development/public/records/query?ckAPIToken=test-token"

    @Test func thousandsOfConnectionsAtOnce() async throws {
        try await ServerHarness().run { c in
            let port = c.port
            // 2,000 connections held open, each having sent half a request.
            let idle = try await Self.onThread { () -> [RawConnection] in
                try (0..<2_000).map { i in
                    let connection = try RawConnection(port: port)
                    try connection.send("POST \(Self.modifyPath) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Len")
                    _ = i
                    return connection
                }
            }
            // 500 more, each sending a whole query at once; every one is answered.
            let statuses = try await withThrowingTaskGroup(of: [String].self) { group in
                for batch in 0..<10 {
                    group.addTask {
                        try await Self.onThread {
                            let connections = try (0..<50).map { _ in try RawConnection(port: port) }
                            for connection in connections {
                                try connection.send(Self.request("POST", Self.queryPath, body: #"{"query": {"recordType": "T"}}"#))
                            }
                            return connections.map { String($0.receiveResponse().prefix(12)) + " batch \(batch)" }
                        }
                    }
                }
                var all: [String] = []
                for try await batch in group { all += batch }
                return all
            }
            #expect(statuses.count == 500)
            #expect(statuses.allSatisfy { $0.hasPrefix("HTTP/1.1 200") }, "\(statuses.filter { !$0.hasPrefix("HTTP/1.1 200") }.prefix(3))")
            // The idle ones leave; the server still answers.
            _ = idle.count
            let answer = try await c.post("public", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "after", "recordType": "T"}}]}"#)
            #expect(answer.status == 200)
        }
    }

    @Test func clientsThatLeaveMidRequestChangeNothing() async throws {
        try await ServerHarness().run { c in
            let port = c.port
            let body = #"{"operations": [{"operationType": "create", "record": {"recordName": "half", "recordType": "T"}}]}"#
            try await Self.onThread {
                for cut in [0, 10, body.utf8.count / 2, body.utf8.count - 1] {
                    // Headers promise the whole body; part of it comes, then the client is gone.
                    let connection = try RawConnection(port: port)
                    try connection.send(Self.request("POST", Self.modifyPath, body: String(body.prefix(cut)), declaredLength: body.utf8.count))
                    shutdown(connection.descriptor, Int32(SHUT_RDWR))
                }
                // Headers only, then gone.
                let connection = try RawConnection(port: port)
                try connection.send("POST \(Self.modifyPath) HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                shutdown(connection.descriptor, Int32(SHUT_RDWR))
            }
            // The server read and dropped each of them; a whole request after them is the only change.
            var answer = try await c.post("public", "records/modify", #"{"operations": [{"operationType": "create", "record": {"recordName": "after", "recordType": "T"}}]}"#)
            #expect(answer.status == 200)
            answer = try await c.post("public", "records/query", #"{"query": {"recordType": "T"}}"#)
            #expect(answer.status == 200)
            let records = answer.json["records"]?.elements ?? []
            #expect(records.compactMap { $0["recordName"]?.stringValue } == ["after"])
        }
    }

    @Test func pastTheLimitRequestsAreToldToRetryAndNothingIsLost() async throws {
        try await ServerHarness { $0.maximumRequestsInFlight = 2 }.run { c in
            let port = c.port
            let courier = try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: "{}", user: "_dave")
            let poll = try ServerCourierTests.pathAndQuery(try #require(courier.json["webcourierURL"]?.stringValue))
            let body = #"{"operations": [{"operationType": "create", "record": {"recordName": "held-NAME", "recordType": "T"}}]}"#
            // Two modifies in flight: whole headers, half their bodies.
            let held = try await Self.onThread { () -> [(RawConnection, String)] in
                try ["a", "b"].map { name in
                    let whole = body.replacingOccurrences(of: "NAME", with: name)
                    let connection = try RawConnection(port: port)
                    try connection.send(Self.request("POST", Self.modifyPath, body: String(whole.prefix(20)), declaredLength: whole.utf8.count))
                    return (connection, String(whole.dropFirst(20)))
                }
            }
            try await Task.sleep(for: .milliseconds(200))
            // A third is refused at once, with CloudKit's retryable error.
            let refused = try await c.post("public", "records/query", #"{"query": {"recordType": "T"}}"#)
            #expect(refused.status == 503)
            #expect(refused.json["serverErrorCode"] == .string("TRY_AGAIN_LATER"))
            #expect(refused.json["retryAfter"] == .int(1))
            #expect(refused.header("Retry-After") == "1")
            #expect(try await c.send(.post, "/device/1/\(c.container)/development/tokens/create", body: "{}", user: "_dave").status == 503)
            // Web courier polls wait rather than work, and are not counted: this one waits its timeout out.
            #expect(try await c.send(.get, poll, apiToken: nil).status == 204)
            // The held requests finish and are applied; then the server takes requests again.
            let answers = try await Self.onThread { () -> [String] in
                held.map { connection, rest in
                    try? connection.send(rest)
                    return String(connection.receiveResponse().prefix(12))
                }
            }
            #expect(answers == ["HTTP/1.1 200", "HTTP/1.1 200"])
            let after = try await c.post("public", "records/query", #"{"query": {"recordType": "T"}}"#)
            #expect(after.status == 200)
            #expect(Set(after.json["records"]?.elements.compactMap { $0["recordName"]?.stringValue } ?? []) == ["held-a", "held-b"])
        }
    }
}
