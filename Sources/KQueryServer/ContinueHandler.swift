import Hummingbird
import NIOCore
import NIOHTTPTypes

/// Answers `Expect: 100-continue` on an upload URL with `100 Continue` at once. curl (and other
/// clients) send it with a large body and wait for the answer before sending the body, a second
/// with curl when none comes: Hummingbird sends none, so every upload over 1 MiB from curl lost a
/// second. Only upload URLs get it: other requests are small, and a refused one (503 before its
/// body is read) should not invite the body.
final class ContinueHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(var head) = unwrapInboundIn(data), head.method == .post,
           head.headerFields[.expect]?.lowercased() == "100-continue", head.path?.hasPrefix(CloudKitServer.uploadPath + "/") == true {
            // Answered here, so the route sees an ordinary request.
            head.headerFields[.expect] = nil
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
            context.fireChannelRead(wrapInboundOut(.head(head)))
            return
        }
        context.fireChannelRead(data)
    }
}
