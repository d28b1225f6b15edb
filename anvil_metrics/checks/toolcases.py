"""The questions of `tools`, `streaming_tools` and `tool_result_recovery`, with their answers.

Why a table of its own: the answer key lives with the questions, and two readers need it —
the judge (`tools.py`) and the simulator's script (`sim/script_tools.py`), which answers
from it. Keeping it apart from the scoring keeps either under a page.

An expected argument is a plain JSON value or one of the wrappers of `jsonmatch`, which say
how strictly it is compared (`jsonmatch.mismatch` with `jsonmatch.ARGUMENTS` is the rule):

    "Paris"          a string: case, surrounding whitespace and a final ".!?" ignored
    Exact("USD")     a string compared as is (enum values, ids, dates)
    AnyOf((a, b))    any of these (a model may write "09:30" or "09:30:00")
    Unordered((..))  a list whose order does not matter (recipients, ids)
    3, 21.5          numbers by value (3.0 is 3), never a string "3" nor a boolean
    True             booleans exactly, never "true"
    {...} / [...]    objects key by key, lists item by item

Arguments the case does not name may be sent if the tool's schema declares them (a model
may fill an optional `unit`), except those in `absent` (inventing a price limit the user
never gave is wrong); a name the schema does not declare always fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from anvil_metrics.checks.jsonmatch import AnyOf, Exact, Unordered


@dataclass(frozen=True, slots=True)
class ExpectedCall:
    name: str
    arguments: Mapping[str, Any]
    absent: tuple[str, ...] = ()  # optional arguments that must not be sent


@dataclass(frozen=True, slots=True)
class ToolCase:
    """One `tools` question: the tools offered, the calls expected (in any order). With no
    calls expected the answer must be text containing `text_contains`."""

    id: str
    kind: str  # single, choice, parallel, types, enum, optional, no_call
    prompt: str
    tools: tuple[str, ...]
    calls: tuple[ExpectedCall, ...]
    text_contains: str | None = None


@dataclass(frozen=True, slots=True)
class RecoveryCase:
    """One `tool_result_recovery` question. The conversation so far: the user's `prompt`,
    the assistant's call of `tool` with `call_arguments`, the tool's `result`.

    kind "use_result": `result` carries `{token}` (made per run from `token_prefix`); the
    final answer must quote it. kind "correct_call": `result` is an error; the next turn must
    call `tool` again as `fixed` says."""

    id: str
    kind: str
    prompt: str
    tool: str
    call_arguments: Mapping[str, Any]
    result: str
    token_prefix: str = ""
    fixed: ExpectedCall | None = None
    tools: tuple[str, ...] = field(default=())  # offered besides `tool`


def _fn(name: str, description: str, properties: dict[str, Any],
        required: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties,
                       "required": list(required)}}}


def _s(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **more}


CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF"]
TOOLS: dict[str, dict[str, Any]] = {t["function"]["name"]: t for t in (
    _fn("get_weather", "Current weather for a city.",
        {"city": _s("City name, e.g. 'Paris'"),
         "unit": _s("Temperature unit", enum=["celsius", "fahrenheit"])}, ("city",)),
    _fn("get_time", "Current local time in a city.", {"city": _s("City name")}, ("city",)),
    _fn("convert_currency", "Convert an amount of money between currencies.",
        {"amount": {"type": "number", "description": "Amount to convert"},
         "from_currency": _s("ISO 4217 code", enum=CURRENCIES),
         "to_currency": _s("ISO 4217 code", enum=CURRENCIES)},
        ("amount", "from_currency", "to_currency")),
    _fn("search_products", "Search the shop's catalogue.",
        {"query": _s("What to look for"),
         "max_price": {"type": "number", "description": "Highest price in USD; omit for no "
                       "limit"},
         "in_stock_only": {"type": "boolean", "description": "Only items in stock (default "
                           "true)"}}, ("query",)),
    _fn("add_to_cart", "Put a product in the shopping cart.",
        {"product_id": _s("Product id, e.g. 'SKU-1'"),
         "quantity": {"type": "integer", "description": "How many", "minimum": 1}},
        ("product_id", "quantity")),
    _fn("set_thermostat", "Set the home thermostat.",
        {"temperature": {"type": "number"},
         "unit": _s("Temperature unit", enum=["celsius", "fahrenheit"])},
        ("temperature", "unit")),
    _fn("send_email", "Send an email.",
        {"to": {"type": "array", "items": {"type": "string"}, "description": "Recipients"},
         "subject": _s("Subject line"), "body": _s("Message text"),
         "urgent": {"type": "boolean", "description": "Mark as urgent (default false)"}},
        ("to", "subject", "body")),
    _fn("create_event", "Create a calendar event.",
        {"title": _s("Event title"),
         "start": {"type": "object", "description": "When it starts",
                   "properties": {"date": _s("YYYY-MM-DD"), "time": _s("HH:MM, 24-hour")},
                   "required": ["date", "time"]},
         "attendees": {"type": "array", "items": {"type": "string"},
                       "description": "Attendees' email addresses"}},
        ("title", "start")),
    _fn("create_ticket", "Open a support ticket.",
        {"title": _s("Short summary"),
         "priority": _s("Priority", enum=["low", "medium", "high", "critical"])},
        ("title", "priority")),
    _fn("list_orders", "List a customer's most recent orders.",
        {"customer_id": _s("Customer id, e.g. 'C-1'"),
         "limit": {"type": "integer", "description": "How many orders"}},
        ("customer_id", "limit")),
    _fn("update_orders", "Change the status of several orders.",
        {"order_ids": {"type": "array", "items": {"type": "integer"}},
         "status": _s("New status", enum=["pending", "shipped", "delivered", "cancelled"])},
        ("order_ids", "status")),
    _fn("get_latest_order", "The customer's most recent order.", {}, ()),
    _fn("get_tracking", "Shipment tracking for an order.",
        {"order_id": {"type": "integer"}}, ("order_id",)),
    _fn("book_table", "Book a restaurant table.",
        {"restaurant": _s("Restaurant name"), "time": _s("HH:MM, 24-hour"),
         "people": {"type": "integer"}}, ("restaurant", "time", "people")),
    _fn("get_stock_price", "Latest price of a stock.", {"symbol": _s("Ticker symbol")},
        ("symbol",)),
    _fn("create_reminder", "Set a reminder.",
        {"text": _s("What to remind of"), "date": _s("YYYY-MM-DD")}, ("text", "date")),
)}

SHOP = ("get_weather", "get_time", "convert_currency", "search_products")


def _city(name: str, *qualifiers: str) -> AnyOf:
    """A city as a model may name it: alone or qualified ("Paris, France")."""
    return AnyOf((name, *(f"{name}, {q}" for q in qualifiers)))


PARIS, TOKYO = _city("Paris", "France"), _city("Tokyo", "Japan")
BERLIN, CHICAGO = _city("Berlin", "Germany"), _city("Chicago", "IL", "USA")
LONDON = _city("London", "UK", "United Kingdom", "England")
NEW_YORK = AnyOf((*_city("New York", "NY", "USA").values, "New York City", "NYC"))


def _call(name: str, absent: tuple[str, ...] = (), **arguments: Any) -> ExpectedCall:
    return ExpectedCall(name, arguments, absent)


F, C = Exact("fahrenheit"), Exact("celsius")
TOOL_CASES: tuple[ToolCase, ...] = (
    ToolCase("single_weather", "single", "What's the weather like in Paris right now?",
             ("get_weather",), (_call("get_weather", city=PARIS),)),
    ToolCase("single_ticket", "single", "Open a ticket titled 'Printer jammed' with low "
             "priority.", ("create_ticket",),
             (_call("create_ticket", title="Printer jammed", priority=Exact("low")),)),
    ToolCase("enum_fahrenheit", "enum", "What's the temperature in Chicago in fahrenheit?",
             ("get_weather",), (_call("get_weather", city=CHICAGO, unit=F),)),
    ToolCase("enum_celsius", "enum", "Weather in Berlin, in Celsius please.",
             ("get_weather",), (_call("get_weather", city=BERLIN, unit=C),)),
    ToolCase("enum_priority", "enum", "The production database is down! Open a critical "
             "ticket titled 'Database down'.", ("create_ticket", "send_email"),
             (_call("create_ticket", title="Database down", priority=Exact("critical")),)),
    ToolCase("choice_time", "choice", "What time is it in Tokyo right now?", SHOP,
             (_call("get_time", city=TOKYO),)),
    ToolCase("choice_currency", "choice", "Convert 250 US dollars to euros.", SHOP,
             (_call("convert_currency", amount=250, from_currency=Exact("USD"),
                    to_currency=Exact("EUR")),)),
    ToolCase("choice_email", "choice", "Email sam@example.com with the subject 'Invoice' "
             "and the text 'Paid today.'", ("create_event", "send_email", "create_ticket"),
             (_call("send_email", to=["sam@example.com"], subject="Invoice",
                    body="Paid today"),)),
    ToolCase("optional_absent", "optional", "Find wireless headphones in the shop.", SHOP,
             (_call("search_products", ("max_price",), query="wireless headphones"),)),
    ToolCase("optional_present", "optional", "Find running shoes in the shop that cost at "
             "most 80 dollars.", SHOP,
             (_call("search_products", query=AnyOf(("running shoes", "running shoe")),
                    max_price=80),)),
    ToolCase("parallel_weather", "parallel", "What's the weather in Paris and in Tokyo? "
             "Look both up.", ("get_weather",),
             (_call("get_weather", city=PARIS), _call("get_weather", city=TOKYO))),
    ToolCase("parallel_mixed", "parallel", "What's the weather in London, and what time is "
             "it in New York?", SHOP,
             (_call("get_weather", city=LONDON), _call("get_time", city=NEW_YORK))),
    ToolCase("parallel_currency", "parallel", "Convert 100 euros to US dollars, and also "
             "100 euros to British pounds.", SHOP,
             (_call("convert_currency", amount=100, from_currency=Exact("EUR"),
                    to_currency=Exact("USD")),
              _call("convert_currency", amount=100, from_currency=Exact("EUR"),
                    to_currency=Exact("GBP")))),
    ToolCase("type_integer", "types", "Add 3 of product SKU-1042 to my cart.",
             ("add_to_cart", "search_products"),
             (_call("add_to_cart", product_id=Exact("SKU-1042"), quantity=3),)),
    ToolCase("type_number", "types", "Set the thermostat to 21.5 degrees Celsius.",
             ("set_thermostat", "get_weather"),
             (_call("set_thermostat", temperature=21.5, unit=C),)),
    ToolCase("type_boolean", "types", "Send an urgent email to ana@example.com with the "
             "subject 'Lunch' saying 'See you at noon.'", ("send_email",),
             (_call("send_email", to=["ana@example.com"], subject="Lunch",
                    body="See you at noon", urgent=True),)),
    ToolCase("type_boolean_false", "types", "Find desk lamps in the shop, including ones "
             "that are out of stock.", SHOP,
             (_call("search_products", ("max_price",), query=AnyOf(("desk lamps", "desk lamp")),
                    in_stock_only=False),)),
    ToolCase("type_array", "types", "Mark orders 1001, 1002 and 1007 as shipped.",
             ("update_orders", "list_orders"),
             (_call("update_orders", order_ids=Unordered((1001, 1002, 1007)),
                    status=Exact("shipped")),)),
    ToolCase("type_nested", "types", "Create an event titled 'Team sync' on 2025-03-14 at "
             "09:30 with dan@example.com and eve@example.com.", ("create_event", "send_email"),
             (_call("create_event", title="Team sync",
                    start={"date": Exact("2025-03-14"), "time": AnyOf(("09:30", "09:30:00"))},
                    attendees=Unordered(("dan@example.com", "eve@example.com"))),)),
    ToolCase("no_call", "no_call", "Without using any tool: what is the capital of France? "
             "Answer in one word.", SHOP, (), text_contains="Paris"),
)

SYSTEM = ("You are a helpful assistant with tools. Call a tool when it helps. When a tool "
          "reports an error, correct the call and try again.")

RECOVERY_CASES: tuple[RecoveryCase, ...] = (
    RecoveryCase("result_order_id", "use_result", "What is the order number of my latest "
                 "order?", "get_latest_order", {},
                 '{"order_id": "{token}", "status": "shipped", "items": 2}', "ORD-"),
    RecoveryCase("result_tracking", "use_result", "Give me the tracking number of order 1182.",
                 "get_tracking", {"order_id": 1182},
                 '{"order_id": 1182, "carrier": "UPS", "tracking_number": "{token}"}', "1Z"),
    RecoveryCase("result_booking", "use_result", "Book a table for two at Luigi's at 19:00 "
                 "and tell me the confirmation code.", "book_table",
                 {"restaurant": "Luigi's", "time": "19:00", "people": 2},
                 '{"booked": true, "confirmation_code": "{token}"}', "LUI-"),
    RecoveryCase("error_city", "correct_call", "What's the weather in Pariss?", "get_weather",
                 {"city": "Pariss"},
                 '{"error": "unknown city \'Pariss\', did you mean \'Paris\'?"}',
                 fixed=_call("get_weather", city=PARIS)),
    RecoveryCase("error_symbol", "correct_call", "What is Apple's stock price?",
                 "get_stock_price", {"symbol": "APPLE"},
                 '{"error": "unknown symbol \'APPLE\'; did you mean \'AAPL\'?"}',
                 fixed=_call("get_stock_price", symbol=Exact("AAPL"))),
    RecoveryCase("error_date", "correct_call", "Remind me to pay rent on March 14, 2025.",
                 "create_reminder", {"text": "pay rent", "date": "03/14/2025"},
                 '{"error": "invalid date \'03/14/2025\': expected YYYY-MM-DD"}',
                 fixed=_call("create_reminder", text="pay rent", date=Exact("2025-03-14"))),
)

TOOL_CASES_BY_PROMPT = {c.prompt: c for c in TOOL_CASES}
RECOVERY_CASES_BY_PROMPT = {c.prompt: c for c in RECOVERY_CASES}


def tool_specs(names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The `tools` field offering `names`."""
    return [TOOLS[n] for n in names]


def concrete(spec: Any) -> Any:
    """A value that satisfies `spec` (what a right answer sends: the first alternative)."""
    if isinstance(spec, Exact):
        return spec.value
    if isinstance(spec, AnyOf):
        return concrete(spec.values[0])
    if isinstance(spec, Unordered):
        return [concrete(v) for v in spec.items]
    if isinstance(spec, Mapping):
        return {k: concrete(v) for k, v in spec.items()}
    if isinstance(spec, list | tuple):
        return [concrete(v) for v in spec]
    return spec


def spec_json(spec: Any) -> Any:
    """`spec` as plain JSON for the reader of checks.json."""
    if isinstance(spec, Exact):
        return spec.value
    if isinstance(spec, AnyOf):
        return {"any_of": [spec_json(v) for v in spec.values]}
    if isinstance(spec, Unordered):
        return {"any_order": [spec_json(v) for v in spec.items]}
    if isinstance(spec, Mapping):
        return {k: spec_json(v) for k, v in spec.items()}
    if isinstance(spec, list | tuple):
        return [spec_json(v) for v in spec]
    return spec


def expected_json(call: ExpectedCall) -> dict[str, Any]:
    out: dict[str, Any] = {"name": call.name, "arguments": spec_json(call.arguments)}
    if call.absent:
        out["absent"] = list(call.absent)
    return out
