#include "src/storage/xml.h"

#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "boost/property_tree/xml_parser.hpp"

namespace heterodl {

absl::StatusOr<XmlTree> ParseXml(const std::string& text) {
  std::istringstream stream(text);
  XmlTree tree;
  try {
    boost::property_tree::read_xml(stream, tree, boost::property_tree::xml_parser::trim_whitespace);
  } catch (const boost::property_tree::xml_parser_error& error) {
    return absl::InvalidArgumentError(
        absl::StrCat("not XML (", error.message(), "): ", text.substr(0, 200)));
  }
  return tree;
}

std::string XmlText(const XmlTree& tree, const std::string& path) {
  return tree.get<std::string>(path, "");
}

}  // namespace heterodl
