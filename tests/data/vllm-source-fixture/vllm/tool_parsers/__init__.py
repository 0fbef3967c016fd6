_TOOL_PARSERS_TO_REGISTER = {
    "toy_json": ("toy_json_tool_parser", "ToyJsonToolParser"),
    "toy_xml": ("toy_xml_tool_parser", "ToyXmlToolParser"),
}
