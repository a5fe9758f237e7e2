"""A fake UPnP Internet gateway on loopback: the device and service descriptions and the three SOAP actions
swarm_app/peer/io/upnp.py uses (AddPortMapping, DeletePortMapping, GetExternalIPAddress). It records every
call and forwards nothing: it is a router that says yes (or, with `refuse`, a SOAP fault)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from contextlib import asynccontextmanager
from typing import AsyncIterator

from aiohttp import web

SERVICE = "urn:schemas-upnp-org:service:WANIPConnection:1"
EXTERNAL_IP = "203.0.113.7"
"""A documentation address (RFC 5737): what the fake router calls its public address."""

DEVICE_XML = f"""<?xml version="1.0"?>
<root xmlns="urn:schemas-upnp-org:device-1-0">
 <specVersion><major>1</major><minor>0</minor></specVersion>
 <device>
  <deviceType>urn:schemas-upnp-org:device:InternetGatewayDevice:1</deviceType>
  <friendlyName>Fake router</friendlyName><manufacturer>tests</manufacturer><modelName>fake</modelName>
  <UDN>uuid:00000000-0000-0000-0000-000000000001</UDN>
  <deviceList><device>
   <deviceType>urn:schemas-upnp-org:device:WANDevice:1</deviceType>
   <friendlyName>WAN</friendlyName><manufacturer>tests</manufacturer><modelName>fake</modelName>
   <UDN>uuid:00000000-0000-0000-0000-000000000002</UDN>
   <deviceList><device>
    <deviceType>urn:schemas-upnp-org:device:WANConnectionDevice:1</deviceType>
    <friendlyName>WAN connection</friendlyName><manufacturer>tests</manufacturer><modelName>fake</modelName>
    <UDN>uuid:00000000-0000-0000-0000-000000000003</UDN>
    <serviceList><service>
     <serviceType>{SERVICE}</serviceType>
     <serviceId>urn:upnp-org:serviceId:WANIPConn1</serviceId>
     <SCPDURL>/wanip.xml</SCPDURL><controlURL>/ctl/IPConn</controlURL><eventSubURL>/evt/IPConn</eventSubURL>
    </service></serviceList>
   </device></deviceList>
  </device></deviceList>
 </device>
</root>"""

ACTIONS = {
    "AddPortMapping": [("NewRemoteHost", "in", "RemoteHost"), ("NewExternalPort", "in", "ExternalPort"),
                       ("NewProtocol", "in", "PortMappingProtocol"), ("NewInternalPort", "in", "InternalPort"),
                       ("NewInternalClient", "in", "InternalClient"), ("NewEnabled", "in", "PortMappingEnabled"),
                       ("NewPortMappingDescription", "in", "PortMappingDescription"),
                       ("NewLeaseDuration", "in", "PortMappingLeaseDuration")],
    "DeletePortMapping": [("NewRemoteHost", "in", "RemoteHost"), ("NewExternalPort", "in", "ExternalPort"),
                          ("NewProtocol", "in", "PortMappingProtocol")],
    "GetExternalIPAddress": [("NewExternalIPAddress", "out", "ExternalIPAddress")],
}
VARIABLES = {"RemoteHost": "string", "ExternalPort": "ui2", "PortMappingProtocol": "string", "InternalPort": "ui2",
             "InternalClient": "string", "PortMappingEnabled": "boolean", "PortMappingDescription": "string",
             "PortMappingLeaseDuration": "ui4", "ExternalIPAddress": "string"}


def service_xml() -> str:
    actions = "".join(
        f"<action><name>{name}</name><argumentList>" + "".join(
            f"<argument><name>{arg}</name><direction>{direction}</direction>"
            f"<relatedStateVariable>{variable}</relatedStateVariable></argument>" for arg, direction, variable in args)
        + "</argumentList></action>" for name, args in ACTIONS.items())
    variables = "".join(f'<stateVariable sendEvents="no"><name>{name}</name><dataType>{kind}</dataType></stateVariable>'
                        for name, kind in VARIABLES.items())
    return (f'<?xml version="1.0"?><scpd xmlns="urn:schemas-upnp-org:service-1-0"><specVersion><major>1</major>'
            f"<minor>0</minor></specVersion><actionList>{actions}</actionList>"
            f"<serviceStateTable>{variables}</serviceStateTable></scpd>")


def soap(body: str) -> str:
    return ('<?xml version="1.0"?><s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/" '
            f's:encodingStyle="http://schemas.xmlsoap.org/soap/encoding/"><s:Body>{body}</s:Body></s:Envelope>')


FAULT = soap('<s:Fault><faultcode>s:Client</faultcode><faultstring>UPnPError</faultstring><detail>'
             '<UPnPError xmlns="urn:schemas-upnp-org:control-1-0"><errorCode>718</errorCode>'
             '<errorDescription>ConflictInMappingEntry</errorDescription></UPnPError></detail></s:Fault>')


class FakeGateway:
    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.location = ""

    async def control(self, request: web.Request) -> web.Response:
        action = request.headers.get("SOAPAction", "").strip('"').rpartition("#")[2]
        body = ET.fromstring(await request.read())
        call = next(iter(body.iter(f"{{{SERVICE}}}{action}")))
        self.calls.append((action, {child.tag.rpartition("}")[2]: child.text or "" for child in call}))
        if self.refuse and action == "AddPortMapping":
            return web.Response(status=500, text=FAULT, content_type="text/xml")
        out = f"<NewExternalIPAddress>{EXTERNAL_IP}</NewExternalIPAddress>" if action == "GetExternalIPAddress" else ""
        return web.Response(text=soap(f'<u:{action}Response xmlns:u="{SERVICE}">{out}</u:{action}Response>'),
                            content_type="text/xml")

    def actions(self, name: str) -> list[dict[str, str]]:
        return [args for action, args in self.calls if action == name]


def xml_handler(text: str):
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=text, content_type="text/xml")
    return handler


@asynccontextmanager
async def fake_gateway(host: str = "127.0.0.1", refuse: bool = False) -> AsyncIterator[FakeGateway]:
    gateway = FakeGateway(refuse)
    app = web.Application()
    app.router.add_get("/rootDesc.xml", xml_handler(DEVICE_XML))
    app.router.add_get("/wanip.xml", xml_handler(service_xml()))
    app.router.add_post("/ctl/IPConn", gateway.control)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, 0).start()
    gateway.location = f"http://{host}:{runner.addresses[0][1]}/rootDesc.xml"
    try:
        yield gateway
    finally:
        await runner.cleanup()
