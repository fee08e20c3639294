// libFuzzer target: AMQP basic properties (headers included) as a delivery
// brings them. The fuzz input is the payload of a content-header frame
// after class id, weight and body size: the property flags and values.
// rabbitmq-c's own amqp_decode_properties decodes it into a pool, then
// CDecode.properties copies it into Swift, as CConnection.readMessage does
// on the connection's I/O thread. Built by scripts/fuzz.sh together with
// the AMQPClient files CDecode needs; never by SwiftPM.
//
// Why a small stack: the decode runs on a thread of 128 KiB, musl's default
// thread stack and the smallest a service thread might get (macOS gives
// secondary threads 512 KiB; glibc, like our I/O thread, 8 MiB). Inputs are
// at most 4 KiB (scripts/fuzz.sh -max_len), so this stands for a small
// stack rather than for a full 128 KiB frame on 8 MiB: without
// CDecode's depth limit, a 4 KiB header of ~600 nested tables overflows
// it (found by this target); rabbitmq-c's own decoding of any 4 KiB input
// fits easily (measured: 1,200 nested arrays in 128 KiB).

import CRabbitMQ

#if canImport(Glibc)
import Glibc
#endif

private let stackBytes = 128 * 1024

private struct Input {
    var bytes: UnsafePointer<UInt8>?
    var size: Int
}

private func decode(_ input: Input) {
    var pool = amqp_pool_t()
    init_amqp_pool(&pool, 4096)
    defer { empty_amqp_pool(&pool) }
    var decoded: UnsafeMutableRawPointer? = nil
    let status = amqp_decode_properties(UInt16(AMQP_BASIC_CLASS), &pool, crabbitmq_bytes(input.bytes, input.size),
                                        &decoded)
    guard status == 0, let raw = decoded else { return }
    var truncated = 0
    let properties = CDecode.properties(raw.assumingMemoryBound(to: amqp_basic_properties_t.self).pointee,
                                        truncated: &truncated)
    // What consumers do next with the headers.
    _ = properties.xDeath
    _ = properties.headers == properties.headers
}

/// Decodes the input as basic properties on a 128 KiB stack.
@_cdecl("LLVMFuzzerTestOneInput")
public func headerDecoderFuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = Input(bytes: data, size: size)
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    pthread_attr_setstacksize(&attributes, stackBytes)
    var thread = pthread_t()
    // The input lives on this stack until the thread is joined.
    let started = withUnsafeMutablePointer(to: &input) { pointer in
        let status = pthread_create(&thread, &attributes, { argument in
            guard let argument else { return nil }
            decode(argument.assumingMemoryBound(to: Input.self).pointee)
            return nil
        }, pointer)
        if status == 0 { pthread_join(thread, nil) }
        return status == 0
    }
    if !started {
        decode(input)  // no thread: decode here rather than skip the input
    }
    return 0
}
