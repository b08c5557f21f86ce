import Crypto
import KQuery
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL
import X509

import Foundation

/// A stand-in for APNs in the test process: HTTP/2 over TLS on 127.0.0.1 (ALPN "h2"), with a
/// certificate made at start for localhost and 127.0.0.1. It records every request and answers
/// from a script (each entry once, in order), then 200.
final class FakeAPNs: Sendable {
    /// One request as the server saw it.
    struct Request: Sendable {
        var method: String
        var path: String
        var version: HTTPVersion
        /// Names lowercased (HTTP/2 sends them so).
        var headers: [String: String]
        var body: [UInt8]
    }

    /// The certificate clients must trust, and its PEM text.
    let certificate: NIOSSLCertificate
    let certificatePEM: String
    let port: Int
    private let channel: any Channel
    private let state: Locked<(requests: [Request], script: [(status: Int, body: String)])>

    /// `https://127.0.0.1:PORT`.
    var url: String { "https://127.0.0.1:\(port)" }
    var requests: [Request] { state.withLock { $0.requests } }

    /// Answers given, in order, to the next requests.
    func script(_ answers: [(status: Int, body: String)]) {
        state.withLock { $0.script += answers }
    }

    fileprivate func answer(_ request: Request) -> (status: Int, body: String) {
        state.withLock { state in
            state.requests.append(request)
            return state.script.isEmpty ? (200, "") : state.script.removeFirst()
        }
    }

    private init(
        certificate: NIOSSLCertificate, pem: String, channel: any Channel, state: Locked<(requests: [Request], script: [(status: Int, body: String)])>
    ) {
        self.certificate = certificate
        certificatePEM = pem
        self.channel = channel
        self.state = state
        port = channel.localAddress?.port ?? 0
    }

    static func start() async throws -> FakeAPNs {
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName { CommonName("localhost") }
        let now = Date()
        let certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey), notValidBefore: now - 3600, notValidAfter: now + 86400,
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                SubjectAlternativeNames([.dnsName("localhost"), .ipAddress(.init(contentBytes: [127, 0, 0, 1]))])
            },
            issuerPrivateKey: .init(key))
        let pem = try certificate.serializeAsPEM().pemString
        let nioCertificate = try NIOSSLCertificate(bytes: Array(pem.utf8), format: .pem)
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(nioCertificate)], privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(key.pemRepresentation.utf8), format: .pem)))
        tls.applicationProtocols = ["h2"]
        let context = try NIOSSLContext(configuration: tls)
        let state = Locked<(requests: [Request], script: [(status: Int, body: String)])>(([], []))
        let recorder = Recorder()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                }.flatMap {
                    channel.configureHTTP2Pipeline(mode: .server) { stream in
                        stream.eventLoop.makeCompletedFuture {
                            try stream.pipeline.syncOperations.addHandlers([HTTP2FramePayloadToHTTP1ServerCodec(), Handler(recorder: recorder)])
                        }
                    }.map { _ in () }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let apns = FakeAPNs(certificate: nioCertificate, pem: pem, channel: channel, state: state)
        recorder.apns.withLock { $0 = apns }
        return apns
    }

    func stop() async throws {
        try await channel.close()
    }

    /// Waits until `condition` holds (polling), at most `timeout`.
    func wait(timeout: Duration = .seconds(15), until condition: @Sendable (FakeAPNs) -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while !condition(self), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
    }

    /// Lets the stream handlers reach the server once it exists.
    private final class Recorder: Sendable {
        let apns = Locked<FakeAPNs?>(nil)
    }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        let recorder: Recorder
        var head: HTTPRequestHead?
        var body: [UInt8] = []

        init(recorder: Recorder) { self.recorder = recorder }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                self.head = head
                body = []
            case .body(var buffer):
                body += buffer.readBytes(length: buffer.readableBytes) ?? []
            case .end:
                guard let head, let apns = recorder.apns.withLock({ $0 }) else { return }
                var headers: [String: String] = [:]
                for (name, value) in head.headers { headers[name.lowercased()] = value }
                let request = Request(method: "\(head.method)", path: head.uri, version: head.version, headers: headers, body: body)
                let (status, text) = apns.answer(request)
                var responseHeaders = HTTPHeaders()
                if let id = headers["apns-id"] { responseHeaders.add(name: "apns-id", value: id) }
                if !text.isEmpty { responseHeaders.add(name: "content-length", value: String(text.utf8.count)) }
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .init(statusCode: status), headers: responseHeaders))), promise: nil)
                if !text.isEmpty { context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: text)))), promise: nil) }
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }
}
