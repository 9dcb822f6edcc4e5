// The TCP segment inside a point-to-point (PPP) frame, read from the frame's raw bytes: what the
// device trace sinks of ns3_tcp_bulk.cc and ns3_tcp_incast.cc need to count data segments.
#ifndef NETSWEEP_BENCH_PPP_TCP_FRAME_H
#define NETSWEEP_BENCH_PPP_TCP_FRAME_H

#include "ns3/packet.h"

#include <cstdint>

namespace netsweep_bench
{

// A TCP segment's sequence number and payload length, read from the raw bytes of a PPP frame
// (2-byte PPP header, then the IPv4 and TCP headers, which ns-3 keeps serialised in the packet
// buffer). Copying 42 bytes is much cheaper than deserialising the three headers. False if the
// frame is not IPv4 carrying TCP.
inline bool
TcpSegmentOf(ns3::Ptr<const ns3::Packet> frame, uint32_t& seq, uint32_t& payload)
{
    uint8_t b[2 + 20 + 20];
    if (frame->GetSize() < sizeof(b))
    {
        return false;
    }
    frame->CopyData(b, sizeof(b));
    const uint32_t ihl = (b[2] & 0x0fu) * 4u;
    if (b[0] != 0x00 || b[1] != 0x21 || b[2 + 9] != 6 || ihl != 20) // PPP IPv4, protocol TCP
    {
        return false;
    }
    const uint32_t ipTotal = (uint32_t(b[4]) << 8) | b[5];
    const uint8_t* tcp = b + 2 + ihl;
    const uint32_t tcpHeader = (tcp[12] >> 4) * 4u;
    seq = (uint32_t(tcp[4]) << 24) | (uint32_t(tcp[5]) << 16) | (uint32_t(tcp[6]) << 8) | tcp[7];
    payload = ipTotal - ihl - tcpHeader;
    return true;
}

} // namespace netsweep_bench

#endif // NETSWEEP_BENCH_PPP_TCP_FRAME_H
