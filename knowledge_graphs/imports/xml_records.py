"""Reading an XML import file as a stream: the elements a format asks for, each a small tree that knows the
line it starts on, with the open elements above it (an eCFR section's part and title).

The file is fed to expat a megabyte at a time and each asked-for element is handed over when it ends, so a
200 MB U.S. Code title never exists as one tree. Namespaces are dropped (USLM's default namespace): a tag is
its local name. Entity declarations are refused (no "billion laughs"); a file that is not well-formed XML is
one error naming its line.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from xml.parsers import expat

from knowledge_graphs.imports.errors import ErrorLog

_CHUNK = 1 << 20


@dataclass(slots=True)
class XmlNode:
    tag: str
    attrib: dict[str, str]
    line: int
    parts: list[str | XmlNode] = field(default_factory=list)   # mixed content in document order

    @property
    def children(self) -> list[XmlNode]:
        return [part for part in self.parts if isinstance(part, XmlNode)]

    def find(self, tag: str) -> XmlNode | None:
        """The first child named `tag`."""
        return next((child for child in self.children if child.tag == tag), None)

    def iter(self, tag: str) -> Iterator[XmlNode]:
        """Descendants named `tag`, in document order (this node included)."""
        if self.tag == tag:
            yield self
        for child in self.children:
            yield from child.iter(tag)

    def text(self) -> str:
        """All text inside, whitespace runs collapsed."""
        return " ".join("".join(self._strings()).split())

    def _strings(self) -> Iterator[str]:
        for part in self.parts:
            if isinstance(part, str):
                yield part
            else:
                yield " "                    # <P>a</P><P>b</P> reads "a b", not "ab"
                yield from part._strings()


def child_text(node: XmlNode, tag: str) -> str | None:
    """The text of `node`'s first child named `tag`, or None when it is missing or empty."""
    child = node.find(tag)
    value = child.text() if child is not None else ""
    return value or None


def xml_elements(data: bytes, log: ErrorLog, tags: Collection[str]) -> Iterator[tuple[XmlNode, tuple[XmlNode, ...]]]:
    """Each element named in `tags` once it ends (its whole subtree), with its open ancestors, outermost first
    and without their children. An asked-for element inside another is part of that one's tree only."""
    parser = expat.ParserCreate(namespace_separator=" ")
    parser.buffer_text = True
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    stack: list[XmlNode] = []
    captured_depth = 0                       # how many asked-for elements are open
    done: list[tuple[XmlNode, tuple[XmlNode, ...]]] = []

    def start(name: str, attributes: dict[str, str]) -> None:
        nonlocal captured_depth
        node = XmlNode(_local(name), {_local(k): v for k, v in attributes.items()}, parser.CurrentLineNumber)
        if captured_depth:
            stack[-1].parts.append(node)
        if node.tag in tags or captured_depth:
            captured_depth += 1
        stack.append(node)

    def end(_name: str) -> None:
        nonlocal captured_depth
        node = stack.pop()
        if captured_depth:
            captured_depth -= 1
            if captured_depth == 0:
                done.append((node, tuple(stack)))

    def characters(text: str) -> None:
        if captured_depth:
            parts = stack[-1].parts
            if parts and isinstance(parts[-1], str):
                parts[-1] += text
            else:
                parts.append(text)

    def entity_declared(*_args: object) -> None:
        raise _EntityDeclared(parser.CurrentLineNumber)      # propagates out of Parse()

    parser.StartElementHandler, parser.EndElementHandler = start, end
    parser.CharacterDataHandler, parser.EntityDeclHandler = characters, entity_declared
    for offset in range(0, max(len(data), 1), _CHUNK):
        try:
            parser.Parse(data[offset:offset + _CHUNK], offset + _CHUNK >= len(data))
        except expat.ExpatError as exc:
            log.add(exc.lineno, None, f"not well-formed XML ({expat.ErrorString(exc.code)})")
            return
        except _EntityDeclared as exc:
            log.add(exc.line, None, "entity declarations are not accepted in an import file")
            return
        yield from done
        done.clear()


class _EntityDeclared(Exception):
    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


def _local(name: str) -> str:
    return name.rsplit(" ", 1)[-1]
