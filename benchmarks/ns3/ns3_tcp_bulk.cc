// ns-3.44 (PyPI wheel): the bulk-transfer scenario of netsweep's benchmarks/bench_engine.py, for
// timing ns-3 on the same packets as our engine.
//
// Two hosts on one point-to-point link (--rate 10 Gb/s, --delay 10 us one way). One TCP connection
// carries --bytes from host 0 to host 1: the sending application writes as many whole segments as
// the socket's send buffer takes, and again whenever the buffer drains; the receiving one reads
// everything. The run stops when the receiver has read the last byte, as the engine stops when the
// message is delivered (the closing handshake and stale timers do not run). sim_time_s counts from
// the first write, once the connection is established (the engine's scenario has no handshake).
//
// TCP as bench_engine.py configures the engine: NewReno with SACK, MSS 1448 without the timestamp
// option (40 bytes of TCP/IP headers: 1488-byte IP packets, the engine's), initial cwnd 10, delayed
// ACKs (an ACK for every second segment, or after 200 ms), 128 KiB send and receive buffers (the
// receive window limits the flow; ns-3's defaults), minimum RTO 200 ms and a 1 us clock granularity
// (the engine's defaults; nothing is lost, so no timer fires). No queue disc: IP hands packets
// straight to the device, whose queue is large enough never to drop, like the engine's links.
//
// Usage: ns3_tcp_bulk [--bytes=100000000] [--rate=10Gbps] [--delay=10us]
// Prints one RESULT line; packets per second are computed from rx_pkts, the data segments the
// receiver's device received (handshake and pure ACKs excluded).
#include "ppp_tcp_frame.h"

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

using namespace ns3;
using netsweep_bench::TcpSegmentOf;

namespace
{

class BulkTransfer
{
  public:
    BulkTransfer(uint64_t bytes, uint32_t mss)
        : m_bytes(bytes),
          m_mss(mss)
    {
    }

    // --- setup ---------------------------------------------------------------------------
    void Listen(Ptr<Node> receiver, uint16_t port)
    {
        m_listener = Socket::CreateSocket(receiver, TcpSocketFactory::GetTypeId());
        m_listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
        m_listener->Listen();
        m_listener->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                      MakeCallback(&BulkTransfer::Accepted, this));
    }

    void Connect(Ptr<Node> sender, Ipv4Address dst, uint16_t port)
    {
        m_sender = Socket::CreateSocket(sender, TcpSocketFactory::GetTypeId());
        m_sender->Bind();
        m_sender->SetConnectCallback(MakeCallback(&BulkTransfer::Connected, this),
                                     MakeCallback(&BulkTransfer::ConnectFailed, this));
        m_sender->SetSendCallback(MakeCallback(&BulkTransfer::SendSpace, this));
        m_sender->Connect(InetSocketAddress(dst, port));
    }

    // --- trace sinks -----------------------------------------------------------------------
    // Frames the receiver's device receives: data segments only (not the handshake).
    void ReceiverRx(Ptr<const Packet> frame)
    {
        uint32_t seq;
        uint32_t payload;
        if (TcpSegmentOf(frame, seq, payload) && payload > 0)
        {
            ++m_rxDataPkts;
        }
    }

    // Frames the receiver's device sends: its ACKs.
    void ReceiverTx(Ptr<const Packet>)
    {
        ++m_ackPkts;
    }

    // --- the transfer ----------------------------------------------------------------------
    void Accepted(Ptr<Socket> s, const Address&)
    {
        s->SetRecvCallback(MakeCallback(&BulkTransfer::Readable, this));
        m_accepted = s;
    }

    void Connected(Ptr<Socket>)
    {
        m_firstWrite = Simulator::Now();
        Write();
    }

    void ConnectFailed(Ptr<Socket>)
    {
        NS_FATAL_ERROR("the sender failed to connect");
    }

    void SendSpace(Ptr<Socket>, uint32_t)
    {
        Write();
    }

    // Writes as many whole segments as the send buffer has room for (the last write excepted): with
    // Nagle's algorithm off TCP sends what it has at once, so a partial segment written would go out
    // as a short one, which the engine never sends.
    void Write()
    {
        while (m_bytesWritten < m_bytes)
        {
            const uint64_t room = m_sender->GetTxAvailable() / m_mss * m_mss;
            const uint64_t n = std::min<uint64_t>(m_bytes - m_bytesWritten, room);
            if (n == 0)
            {
                return; // SendSpace calls again when ACKs free the buffer
            }
            const int sent = m_sender->Send(Create<Packet>(uint32_t(n)));
            if (sent <= 0)
            {
                return;
            }
            m_bytesWritten += uint64_t(sent);
        }
    }

    void Readable(Ptr<Socket> s)
    {
        Ptr<Packet> p;
        while ((p = s->Recv()) && p->GetSize() > 0)
        {
            m_bytesRx += p->GetSize();
        }
        if (m_bytesRx == m_bytes)
        {
            m_lastRead = Simulator::Now();
            m_finished = true;
            Simulator::Stop();
        }
    }

    uint64_t m_bytes;
    uint32_t m_mss;
    Ptr<Socket> m_listener;
    Ptr<Socket> m_sender;
    Ptr<Socket> m_accepted;
    uint64_t m_bytesWritten{0};
    uint64_t m_bytesRx{0};
    uint64_t m_rxDataPkts{0};
    uint64_t m_ackPkts{0};
    bool m_finished{false};
    Time m_firstWrite;
    Time m_lastRead;
};

} // namespace

int
main(int argc, char* argv[])
{
    auto t0 = std::chrono::steady_clock::now();
    uint64_t bytes = 100000000;
    std::string rate = "10Gbps";
    std::string delay = "10us";
    CommandLine cmd;
    cmd.AddValue("bytes", "bytes to transfer", bytes);
    cmd.AddValue("rate", "link rate", rate);
    cmd.AddValue("delay", "one-way link delay", delay);
    cmd.Parse(argc, argv);

    const uint32_t mss = 1448;
    const uint32_t socketBuf = 131072; // 128 KiB
    Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TcpNewReno::GetTypeId()));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(mss));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(2));
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MilliSeconds(200)));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(socketBuf));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(socketBuf));
    Config::SetDefault("ns3::TcpSocket::TcpNoDelay", BooleanValue(true)); // no Nagle, as the engine
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(false));
    Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true)); // a window > 64 KiB
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(200)));
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MicroSeconds(1)));

    NodeContainer hosts;
    hosts.Create(2);
    InternetStackHelper stack;
    stack.Install(hosts);

    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", StringValue(rate));
    p2p.SetChannelAttribute("Delay", StringValue(delay));
    // The window is about 90 segments; a queue of 10,000 never drops, as the engine's links.
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("10000p"));
    NetDeviceContainer link = p2p.Install(hosts);
    Ipv4AddressHelper addr;
    addr.SetBase("10.1.1.0", "255.255.255.0");
    Ipv4InterfaceContainer ifs = addr.Assign(link);
    // Assign has installed ns-3's default queue disc (FqCoDel) on both devices; the engine's
    // links have none, so remove it and let IP hand packets straight to the device queue.
    TrafficControlHelper().Uninstall(link);

    BulkTransfer transfer(bytes, mss);
    const uint16_t port = 5001;
    transfer.Listen(hosts.Get(1), port);
    // at time 0 in the sender's context, once Run has initialised the nodes (their traffic-control
    // layers learn their devices then)
    Simulator::ScheduleWithContext(hosts.Get(0)->GetId(), Time(0), &BulkTransfer::Connect, &transfer,
                                   hosts.Get(0), ifs.GetAddress(1), port);
    link.Get(1)->TraceConnectWithoutContext("MacRx", MakeCallback(&BulkTransfer::ReceiverRx, &transfer));
    link.Get(1)->TraceConnectWithoutContext("MacTx", MakeCallback(&BulkTransfer::ReceiverTx, &transfer));

    Simulator::Stop(Seconds(3600));
    auto t1 = std::chrono::steady_clock::now();
    Simulator::Run();
    auto t2 = std::chrono::steady_clock::now();
    const uint64_t events = Simulator::GetEventCount();
    const uint64_t drops = DynamicCast<PointToPointNetDevice>(link.Get(0))->GetQueue()->GetTotalDroppedPackets();
    const double simTime = (transfer.m_lastRead - transfer.m_firstWrite).GetSeconds();
    const double handshake = transfer.m_firstWrite.GetSeconds();
    const bool finished = transfer.m_finished;
    Simulator::Destroy();

    const double setup = std::chrono::duration<double>(t1 - t0).count();
    const double run = std::chrono::duration<double>(t2 - t1).count();
    std::printf("RESULT sim=ns3-cxx-bulk bytes_rx=%llu rx_pkts=%llu ack_pkts=%llu events=%llu "
                "sim_time_s=%.6f goodput_gbps=%.3f run_s=%.4f pkts_per_s=%.0f events_per_s=%.0f "
                "drops=%llu handshake_s=%.6f setup_s=%.4f finished=%d\n",
                (unsigned long long)transfer.m_bytesRx,
                (unsigned long long)transfer.m_rxDataPkts,
                (unsigned long long)transfer.m_ackPkts,
                (unsigned long long)events,
                simTime,
                transfer.m_bytesRx * 8.0 / simTime / 1e9, // bytes -> bits, per second -> Gb/s
                run,
                transfer.m_rxDataPkts / run,
                events / run,
                (unsigned long long)drops,
                handshake,
                setup,
                finished ? 1 : 0);
    return finished ? 0 : 1;
}
